"""OpenAI response objects and stream chunks, built as dicts and encoded with orjson.

Streaming chunks are on the per-token path, so each request gets an encoder that pre-encodes the
bytes every chunk shares (id, created, model) once, and per event only the delta is encoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from gateway.core.assemble import ChoiceEvent, Usage

_NULL = b"null"


def _frame(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


class ChunkEncoder:
    """Encodes ``chat.completion.chunk`` (chat) or ``text_completion`` (legacy) stream events."""

    def __init__(
        self,
        *,
        chat: bool,
        completion_id: str,
        created: int,
        model: str,
        include_usage: bool = False,
        continuous_usage: bool = False,
        index_offset: int = 0,
    ) -> None:
        self._chat = chat
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": completion_id, "object": obj, "created": created, "model": model}
        self._head = orjson.dumps(head)[:-1] + b',"system_fingerprint":null,"choices":['
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self._usage_tail = include_usage or continuous_usage
        self.index_offset = index_offset

    def _chunk(self, choices: bytes, usage: Usage | None) -> bytes:
        if self._usage_tail:
            tail = orjson.dumps(usage.as_dict()) if (usage is not None and self.continuous_usage) else _NULL
            return _frame(self._head + choices + b'],"usage":' + tail + b"}")
        return _frame(self._head + choices + b"]}")

    def _choice(self, index: int, delta: bytes, finish_reason: str | None, logprobs: Any) -> bytes:
        fr = _NULL if finish_reason is None else b'"' + finish_reason.encode() + b'"'
        lp = _NULL if logprobs is None else orjson.dumps(logprobs)
        index_bytes = str(index + self.index_offset).encode()
        if self._chat:
            return (
                b'{"index":'
                + index_bytes
                + b',"delta":'
                + delta
                + b',"logprobs":'
                + lp
                + b',"finish_reason":'
                + fr
                + b"}"
            )
        return (
            b'{"index":' + index_bytes + b',"text":' + delta + b',"logprobs":' + lp + b',"finish_reason":' + fr + b"}"
        )

    def role_chunks(self, n: int, usage: Usage | None = None) -> bytes:
        """The first chunk of each chat choice: ``delta.role = "assistant"``."""
        if not self._chat:
            return b""
        return b"".join(
            self._chunk(self._choice(i, b'{"role":"assistant","content":""}', None, None), usage) for i in range(n)
        )

    def events(self, events: Sequence[ChoiceEvent], usage: Usage | None) -> bytes:
        """Frames for one batch of events: content first, then a separate finish chunk (as OpenAI
        does: the last chunk of a choice has an empty delta and the finish reason)."""
        out = []
        for event in events:
            if event.text or event.logprobs is not None:
                if self._chat:
                    delta = b'{"content":' + orjson.dumps(event.text) + b"}"
                else:
                    delta = orjson.dumps(event.text)
                out.append(self._chunk(self._choice(event.index, delta, None, event.logprobs), usage))
            if event.finish_reason is not None:
                delta = b"{}" if self._chat else b'""'
                out.append(self._chunk(self._choice(event.index, delta, event.finish_reason, None), usage))
        return b"".join(out)

    def usage_chunk(self, usage: Usage) -> bytes:
        """The extra last chunk of ``include_usage``: no choices, the totals."""
        return _frame(self._head + b'],"usage":' + orjson.dumps(usage.as_dict()) + b"}")


DONE_FRAME = b"data: [DONE]\n\n"


def error_frame(body: dict[str, Any]) -> bytes:
    return _frame(orjson.dumps(body))


def completion_object(
    *,
    chat: bool,
    completion_id: str,
    created: int,
    model: str,
    texts: Sequence[str],
    finish_reasons: Sequence[str | None],
    logprobs: Sequence[Any] | None,
    usage: Usage,
) -> dict[str, Any]:
    """A whole ``chat.completion`` or ``text_completion`` object."""
    choices = []
    for i, text in enumerate(texts):
        choice: dict[str, Any] = {"index": i}
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "refusal": None, "tool_calls": None}
        else:
            choice["text"] = text
        choice["logprobs"] = logprobs[i] if logprobs is not None else None
        choice["finish_reason"] = finish_reasons[i]
        choices.append(choice)
    return {
        "id": completion_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
        "usage": usage.as_dict(),
    }
