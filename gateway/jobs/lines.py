"""A batch input file, read and checked line by line before any of it runs.

OpenAI's format: one JSON object per line, ``{"custom_id", "method": "POST", "url", "body"}``.
What is checked here is the envelope, so that a file the gateway takes is one it can run: the
file is UTF-8, every line is an object with a unique non-empty ``custom_id``, ``POST``, a URL the
Batch API serves, a JSON object as body, and no ``stream`` (a batch line's answer is one
object). The body's own content is checked when the line runs, by its endpoint, exactly as a
request's is: a line its endpoint would answer with a 400 ends in the batch's error file with that
very answer, and the other lines still run.

One difference from OpenAI: a file may mix endpoints (chat and embeddings lines together). The
batch's ``endpoint`` must be one of them; OpenAI, which wants every line to name it, takes a
subset of what this takes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gateway.errors import InvalidRequestError

BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
"""The endpoints a batch line may name."""

MAX_CUSTOM_ID = 512
"""Characters in a ``custom_id`` (OpenAI documents none; this keeps one line's key small)."""


@dataclass(frozen=True, slots=True)
class InputLine:
    """One request of a batch, as it is stored and run."""

    line: int
    """Its 1-based line number in the input file (blank lines counted), the order of the output."""
    custom_id: str
    url: str
    body: str
    """The body as JSON text: the value the file holds (the standard library wrote it again,
    as it parsed it: any JSON number, however long, stays what it was)."""


def parse_input_file(content: bytes, max_lines: int) -> list[InputLine]:
    """Every request in ``content``; an ``InvalidRequestError`` naming the first bad line."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(f"the file is not UTF-8 (byte {exc.start})") from None
    lines: list[InputLine] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        if len(lines) >= max_lines:
            raise _bad(f"the file holds more than {max_lines} requests, the most one batch takes")
        line = _parse_line(raw, number)
        if line.custom_id in seen:
            raise _bad(f"line {number}: custom_id {line.custom_id!r} is used by an earlier line; each must be unique")
        seen.add(line.custom_id)
        lines.append(line)
    if not lines:
        raise _bad("the file holds no requests")
    return lines


def _parse_line(raw: str, number: int) -> InputLine:
    try:
        item = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise _bad(f"line {number} is not JSON ({exc})") from None
    if not isinstance(item, dict):
        raise _bad(f"line {number} is not a JSON object")
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise _bad(f"line {number}: custom_id must be a non-empty string")
    if len(custom_id) > MAX_CUSTOM_ID:
        raise _bad(f"line {number}: custom_id is longer than {MAX_CUSTOM_ID} characters")
    if item.get("method") != "POST":
        raise _bad(f"line {number}: method must be 'POST', got {item.get('method')!r}")
    url = item.get("url")
    if url not in BATCH_ENDPOINTS:
        raise _bad(f"line {number}: url must be one of {', '.join(BATCH_ENDPOINTS)}; got {url!r}")
    body = item.get("body")
    if not isinstance(body, dict):
        raise _bad(f"line {number}: body must be a JSON object")
    if body.get("stream") not in (None, False):
        raise _bad(f"line {number}: stream is not supported in a batch (each line's answer is one object)")
    unknown = set(item) - {"custom_id", "method", "url", "body"}
    if unknown:
        raise _bad(f"line {number}: unknown field(s) {', '.join(sorted(unknown))}")
    return InputLine(number, custom_id, str(url), json.dumps(body, separators=(",", ":")))


def _bad(message: str) -> InvalidRequestError:
    return InvalidRequestError(f"Invalid batch input file: {message}.", param="file", code="invalid_batch_file")
