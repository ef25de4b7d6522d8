"""Parse a replay script and turn it into the exact responses the scripted model sends.

Why: gateway tests need backend behaviour a real model only produces by chance (a UTF-8 character
split across responses, a stop string split across deltas, n>1 interleavings, an error after k
responses, a slow first token). The test writes that behaviour as JSON in ``text_input``; this
module validates it and plans the responses, so model.py only sleeps, checks cancellation and sends.
An agent's loop sends the same conversation again after each tool call: ``after`` keys the later
steps on what the prompt holds after the script (a tool's output).
Pure Python + numpy: importable without Triton. The format is documented in tests/triton_models/README.md.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

_RESPONSE_KEYS = frozenset(
    {"text", "utf8", "finish_reason", "num_output_tokens", "logprobs", "cumulative_logprob", "delay"}
)
_SCRIPT_KEYS = frozenset(
    {
        "responses",
        "choices",
        "after",
        "num_input_tokens",
        "error",
        "hang",
        "echo_inputs",
        "replay_when_not_streaming",
        "log",
    }
)
_AFTER_KEYS = frozenset({"seen", "responses", "choices"})
RETURN_FLAGS = (
    "return_finish_reason",
    "return_num_input_tokens",
    "return_num_output_tokens",
    "return_logprobs",
    "return_cumulative_logprob",
)


class ScriptError(ValueError):
    """The script is malformed; the message goes back as an INVALID_ARG error."""


@dataclass(frozen=True)
class ScriptedResponse:
    """One response of the script, already decoded."""

    text: list[bytes]
    finish_reason: list[str]
    num_output_tokens: list[int]
    logprobs: list[str]
    cumulative_logprob: list[float]
    delay: float = 0.0


@dataclass(frozen=True)
class Script:
    responses: list[ScriptedResponse]
    num_input_tokens: int = 1
    error_message: str | None = None
    error_after: int = 0
    hang: float = 0.0
    echo_inputs: bool = False
    replay_when_not_streaming: bool = False
    log: str | None = None


@dataclass(frozen=True)
class Step:
    """What to do next: wait ``delay`` (watching for cancellation), then send outputs or an error."""

    delay: float
    outputs: dict[str, np.ndarray] | None
    error: str | None
    final: bool


SCRIPT_OPEN, SCRIPT_CLOSE = "<script>", "</script>"


def extract_json(text_input: bytes) -> Any:
    """The script JSON (``locate_script``'s first half)."""
    return locate_script(text_input)[0]


def locate_script(text_input: bytes) -> tuple[Any, str]:
    """The script JSON and the text after it. The script is the whole input; else what lies
    between the last ``<script>`` and the ``</script>`` after it (for prompts with other JSON
    around it, e.g. a template's tools section), the text after being what follows that
    ``</script>``; else (after a chat template wrapped it) the outermost braces, with no text after
    (only a tagged script has an ``after``)."""
    text = text_input.decode("utf-8", errors="replace")
    try:
        return json.loads(text), ""
    except json.JSONDecodeError:
        opened = text.rfind(SCRIPT_OPEN)
        closed = text.find(SCRIPT_CLOSE, opened + 1)
        rest = ""
        if opened >= 0 and closed > opened:
            start, end = opened + len(SCRIPT_OPEN), closed - 1
            rest = text[closed + len(SCRIPT_CLOSE) :]
        else:
            start, end = text.find("{"), text.rfind("}")
        if start < 0 or end <= start:
            raise ScriptError("scripted: text_input holds no JSON script") from None
        try:
            return json.loads(text[start : end + 1]), rest
        except json.JSONDecodeError as exc:
            raise ScriptError(f"scripted: malformed script JSON: {exc}") from None


def _list(raw: dict[str, Any], key: str, size: int, default: Any) -> list[Any]:
    value = raw.get(key)
    if value is None:
        return [default] * size
    if not isinstance(value, list) or len(value) != size:
        raise ScriptError(f"scripted: '{key}' must be a list with one element per sequence ({size})")
    return value


def _parse_response(raw: Any, index: int, last: bool) -> ScriptedResponse:
    if not isinstance(raw, dict) or not set(raw) <= _RESPONSE_KEYS:
        raise ScriptError(f"scripted: response {index} must be an object with keys among {sorted(_RESPONSE_KEYS)}")
    if "text" in raw:
        try:
            text = [base64.b64decode(item, validate=True) for item in raw["text"]]
        except (binascii.Error, TypeError, ValueError) as exc:
            raise ScriptError(f"scripted: response {index} 'text' must be base64 strings: {exc}") from None
    elif "utf8" in raw:
        text = [str(item).encode("utf-8") for item in raw["utf8"]]
    else:
        raise ScriptError(f"scripted: response {index} needs 'text' (base64 list) or 'utf8' (string list)")
    size = len(text)
    return ScriptedResponse(
        text=text,
        finish_reason=[str(v) for v in _list(raw, "finish_reason", size, "stop" if last else "None")],
        num_output_tokens=[int(v) for v in _list(raw, "num_output_tokens", size, 1)],
        logprobs=[v if isinstance(v, str) else json.dumps(v) for v in _list(raw, "logprobs", size, None)],
        cumulative_logprob=[float(v) for v in _list(raw, "cumulative_logprob", size, 0.0)],
        delay=float(raw.get("delay", 0.0)),
    )


def _choice_responses(choices: Any, request_id: str) -> Any:
    """``choices[i]`` for the request of choice i: the gateway sends a request per choice, with
    the id ``<request id>-<i>``."""
    if not isinstance(choices, list):
        raise ScriptError("scripted: 'choices' must be a list of response lists")
    suffix = request_id.rpartition("-")[2]
    if not suffix.isdigit() or int(suffix) >= len(choices):
        raise ScriptError(f"scripted: request id '{request_id}' names no choice of the {len(choices)} scripted")
    return choices[int(suffix)]


def _selected(data: dict[str, Any], request_id: str, where: str = "") -> list[Any]:
    """The raw responses of a script (or of one of its ``after`` entries, ``where`` naming it):
    ``responses``, or the request's entry of ``choices``."""
    if "choices" in data and "responses" in data:
        raise ScriptError(f"scripted: {where or 'a script'} has 'responses' or 'choices', not both")
    raw = _choice_responses(data["choices"], request_id) if "choices" in data else data.get("responses", [])
    if not isinstance(raw, list):
        raise ScriptError(f"scripted: {where + ' ' if where else ''}'responses' must be a list")
    return raw


def _after(entries: Any, request_id: str, rest: str) -> list[Any] | None:
    """The responses of the last ``after`` entry whose ``seen`` is in ``rest`` (the prompt after the
    script), or None. Every entry is checked, whichever is picked: a malformed one always fails."""
    if not isinstance(entries, list):
        raise ScriptError('scripted: \'after\' must be a list of {"seen": str, "responses": [...]}')
    picked = None
    for index, entry in enumerate(entries):
        where = f"'after' entry {index}"
        if not isinstance(entry, dict) or not set(entry) <= _AFTER_KEYS:
            raise ScriptError(f"scripted: {where} must be an object with keys among {sorted(_AFTER_KEYS)}")
        seen = entry.get("seen")
        if not isinstance(seen, str) or not seen:
            raise ScriptError(f"scripted: {where} needs 'seen', a non-empty string")
        raw = _selected(entry, request_id, where)
        if not raw:
            raise ScriptError(f"scripted: {where} needs 'responses' or 'choices'")
        for number, response in enumerate(raw):
            try:
                _parse_response(response, number, number == len(raw) - 1)
            except ScriptError as exc:
                raise ScriptError(f"scripted: {where}: {str(exc).removeprefix('scripted: ')}") from None
        if seen in rest:
            picked = raw
    return picked


def parse_script(text_input: bytes, request_id: str = "") -> Script:
    data, rest = locate_script(text_input)
    if not isinstance(data, dict) or not set(data) <= _SCRIPT_KEYS:
        raise ScriptError(f"scripted: the script must be an object with keys among {sorted(_SCRIPT_KEYS)}")
    raw_responses = _selected(data, request_id)
    if "after" in data:
        raw_responses = _after(data["after"], request_id, rest) or raw_responses
    responses = [_parse_response(r, i, i == len(raw_responses) - 1) for i, r in enumerate(raw_responses)]
    error = data.get("error")
    if error is not None and (not isinstance(error, dict) or not isinstance(error.get("message"), str)):
        raise ScriptError('scripted: \'error\' must be {"message": str, "after": int}')
    if not responses and error is None and not data.get("echo_inputs"):
        raise ScriptError("scripted: a script needs 'responses', 'error' or 'echo_inputs'")
    return Script(
        responses=responses,
        num_input_tokens=int(data.get("num_input_tokens", 1)),
        error_message=None if error is None else error["message"],
        error_after=0 if error is None else int(error.get("after", 0)),
        hang=float(data.get("hang", 0.0)),
        echo_inputs=bool(data.get("echo_inputs", False)),
        replay_when_not_streaming=bool(data.get("replay_when_not_streaming", False)),
        log=None if data.get("log") is None else str(data["log"]),
    )


def merge(responses: list[ScriptedResponse]) -> ScriptedResponse:
    """Non-streaming: what a real backend would send at the end (texts joined, tokens summed)."""
    size = len(responses[0].text)
    logprobs = []
    for index in range(size):
        parts = [json.loads(r.logprobs[index]) for r in responses]
        joined = [entry for part in parts for entry in part or []]
        logprobs.append("null" if all(part is None for part in parts) else json.dumps(joined))
    return ScriptedResponse(
        text=[b"".join(r.text[i] for r in responses) for i in range(size)],
        finish_reason=responses[-1].finish_reason,
        num_output_tokens=[sum(r.num_output_tokens[i] for r in responses) for i in range(size)],
        logprobs=logprobs,
        cumulative_logprob=responses[-1].cumulative_logprob,
        delay=sum(r.delay for r in responses),
    )


def build_outputs(response: ScriptedResponse, flags: dict[str, bool], num_input_tokens: int) -> dict[str, np.ndarray]:
    outputs = {"text_output": np.array(response.text, dtype=np.object_)}
    if flags.get("return_finish_reason"):
        outputs["finish_reason"] = np.array(response.finish_reason, dtype=np.object_)
    if flags.get("return_num_input_tokens"):
        outputs["num_input_tokens"] = np.array([num_input_tokens], dtype=np.uint32)
    if flags.get("return_num_output_tokens"):
        outputs["num_output_tokens"] = np.array(response.num_output_tokens, dtype=np.uint32)
    if flags.get("return_logprobs"):
        outputs["logprobs"] = np.array(response.logprobs, dtype=np.object_)
    if flags.get("return_cumulative_logprob"):
        outputs["cumulative_logprob"] = np.array(response.cumulative_logprob, dtype=np.float32)
    return outputs


def echo_response(inputs: dict[str, Any]) -> ScriptedResponse:
    """One response whose text is a JSON record of every input the model received."""
    return ScriptedResponse(
        text=[json.dumps(inputs, sort_keys=True).encode()],
        finish_reason=["stop"],
        num_output_tokens=[1],
        logprobs=["null"],
        cumulative_logprob=[0.0],
    )


def plan(script: Script, stream: bool, flags: dict[str, bool], inputs: dict[str, Any]) -> list[Step]:
    """The steps to run for this request, in order; the last one carries the FINAL flag.

    Streaming (or ``replay_when_not_streaming``): the responses before ``error.after``, one by one.
    Not streaming: those responses merged into one, like a real backend; if the error comes before
    the end, only the error is sent (after the summed delays).
    """
    responses = [echo_response(inputs)] if script.echo_inputs else list(script.responses)
    after = len(responses) if script.error_message is None else min(script.error_after, len(responses))
    to_send = responses[:after]
    error_delay = 0.0
    if not stream and not script.replay_when_not_streaming and to_send:
        if after < len(responses):
            error_delay, to_send = sum(r.delay for r in to_send), []
        else:
            to_send = [merge(to_send)]
    steps = [Step(r.delay, build_outputs(r, flags, script.num_input_tokens), None, False) for r in to_send]
    if script.error_message is not None:
        steps.append(Step(error_delay, None, script.error_message, True))
    elif steps:
        steps[-1] = Step(steps[-1].delay, steps[-1].outputs, None, True)
    return steps
