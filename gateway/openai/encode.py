"""OpenAI's response shapes: stream chunks (bytes, on the per-token path) and whole response objects.

Streaming chunks are on the per-token path, so each request gets an encoder that pre-encodes the
bytes every chunk shares (the framing's prefix, id, created, model) once, and per event only the
delta is encoded. The framing itself (SSE's ``data: `` … ``\\n\\n``) is the HTTP edge's, passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from gateway.core.assemble import ChoiceEvent, Usage
from gateway.core.logprobs import merge_completion_logprobs
from gateway.core.toolcalls import ToolCallOut

_NULL = b"null"

Framing = tuple[bytes, bytes]
"""What goes before and after each chunk's JSON on the wire."""


def _call_opening(call: ToolCallOut) -> bytes:
    """A call's first delta: its index, id and name (arguments follow in the next one)."""
    head = {"index": call.index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
    return b'{"tool_calls":[' + orjson.dumps(head) + b"]}"


def _call_arguments(call: ToolCallOut) -> bytes:
    body = {"index": call.index, "function": {"arguments": call.arguments}}
    return b'{"tool_calls":[' + orjson.dumps(body) + b"]}"


def _function_call_opening(call: ToolCallOut) -> bytes:
    """The deprecated ``function_call`` delta: the name first, as ``_call_opening``."""
    return b'{"function_call":' + orjson.dumps({"name": call.name, "arguments": ""}) + b"}"


def _function_call_arguments(call: ToolCallOut) -> bytes:
    return b'{"function_call":' + orjson.dumps({"arguments": call.arguments}) + b"}"


def _finish(reason: str | None, legacy_functions: bool) -> str | None:
    """OpenAI's finish reason of a turn that called a deprecated ``functions`` entry."""
    return "function_call" if legacy_functions and reason == "tool_calls" else reason


def _reasoning_delta(reasoning: str) -> bytes:
    """A reasoning delta under both of its names: vLLM's ``reasoning`` and the
    ``reasoning_content`` that DeepSeek's API and older vLLM send (clients read one or the other)."""
    text = orjson.dumps(reasoning)
    return b'{"reasoning_content":' + text + b',"reasoning":' + text + b"}"


def tool_call_object(call: ToolCallOut) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


class ChunkEncoder:
    """Encodes ``chat.completion.chunk`` (chat) or ``text_completion`` (legacy) stream chunks,
    each one JSON object wrapped in ``framing``; a call's chunks are concatenated."""

    def __init__(
        self,
        *,
        chat: bool,
        completion_id: str,
        created: int,
        model: str,
        framing: Framing,
        include_usage: bool = False,
        continuous_usage: bool = False,
        legacy_functions: bool = False,
    ) -> None:
        self._chat = chat
        self._legacy_functions = legacy_functions
        self._call_deltas = (
            (_function_call_opening, _function_call_arguments) if legacy_functions else (_call_opening, _call_arguments)
        )
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": completion_id, "object": obj, "created": created, "model": model}
        prefix, self._suffix = framing
        self._head = prefix + orjson.dumps(head)[:-1] + b',"system_fingerprint":null,"choices":['
        self.continuous_usage = continuous_usage
        self._usage_tail = include_usage or continuous_usage
        self._end = (b'],"usage":null}' if self._usage_tail else b"]}") + self._suffix
        """How a chunk without its own usage ends."""
        self._text_openings: dict[int, bytes] = {}
        """Per choice, the bytes of a content chunk before its text (see ``events``)."""
        self._text_closing = (
            b'},"logprobs":null,"finish_reason":null}' if chat else b',"logprobs":null,"finish_reason":null}'
        ) + self._end

    def _chunk(self, choices: bytes, usage: Usage | None) -> bytes:
        if self._usage_tail:
            tail = orjson.dumps(usage.as_dict()) if (usage is not None and self.continuous_usage) else _NULL
            return self._head + choices + b'],"usage":' + tail + b"}" + self._suffix
        return self._head + choices + b"]}" + self._suffix

    def _choice(self, index: int, delta: bytes, finish_reason: str | None, logprobs: Any) -> bytes:
        fr = _NULL if finish_reason is None else b'"' + finish_reason.encode() + b'"'
        lp = _NULL if logprobs is None else orjson.dumps(logprobs)
        field = b',"delta":' if self._chat else b',"text":'
        return (
            b'{"index":' + str(index).encode() + field + delta + b',"logprobs":' + lp + b',"finish_reason":' + fr + b"}"
        )

    def role_chunks(self, n: int, usage: Usage | None = None) -> bytes:
        """The first chunk of each chat choice: ``delta.role = "assistant"``; nothing for legacy."""
        if not self._chat:
            return b""
        return b"".join(
            self._chunk(self._choice(i, b'{"role":"assistant","content":""}', None, None), usage) for i in range(n)
        )

    def events(self, events: Sequence[ChoiceEvent], usage: Usage | None = None) -> bytes:
        """Chunks for one batch of events: content first, then a separate finish chunk (as OpenAI
        does: the last chunk of a choice has an empty delta and the finish reason)."""
        out = []
        plain = usage is None or not self.continuous_usage
        for index, text, finish_reason, logprobs, tool_calls, reasoning in events:
            if reasoning:
                # Its own chunk, before the answer's: a delta is reasoning or content, as vLLM's.
                said = None if text else logprobs
                out.append(self._chunk(self._choice(index, _reasoning_delta(reasoning), None, said), usage))
                if said is not None:
                    logprobs = None
            if logprobs is None and plain:
                # The per-token chunk (text alone, no usage of its own): three pieces, two of
                # them made once per choice.
                if text:
                    opening = self._text_openings.get(index)
                    if opening is None:
                        opening = self._text_openings[index] = self._text_opening(index)
                    out.append(opening + orjson.dumps(text) + self._text_closing)
            elif text or logprobs is not None:
                if self._chat:
                    delta = b'{"content":' + orjson.dumps(text) + b"}"
                else:
                    delta = orjson.dumps(text)
                out.append(self._chunk(self._choice(index, delta, None, logprobs), usage))
            if tool_calls is not None:
                call_opening, call_arguments = self._call_deltas
                for call in tool_calls:
                    if call.opens:
                        out.append(self._chunk(self._choice(index, call_opening(call), None, None), usage))
                    if call.arguments or (call.opens and call.closes):
                        out.append(self._chunk(self._choice(index, call_arguments(call), None, None), usage))
            if finish_reason is not None:
                delta = b"{}" if self._chat else b'""'
                finish = _finish(finish_reason, self._legacy_functions)
                out.append(self._chunk(self._choice(index, delta, finish, None), usage))
        return out[0] if len(out) == 1 else b"".join(out)

    def _text_opening(self, index: int) -> bytes:
        field = b',"delta":{"content":' if self._chat else b',"text":'
        return self._head + b'{"index":' + str(index).encode() + field

    def usage_chunk(self, usage: Usage) -> bytes:
        """The extra last chunk of ``include_usage``: no choices, the totals."""
        return self._head + b'],"usage":' + orjson.dumps(usage.as_dict()) + b"}" + self._suffix


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
    tool_calls: Sequence[Sequence[ToolCallOut]] | None = None,
    legacy_functions: bool = False,
    reasoning: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A whole ``chat.completion`` or ``text_completion`` object. A chat choice that made tool
    calls has ``content`` null when it said nothing else, as OpenAI answers; with
    ``legacy_functions`` its one call is ``message.function_call``. ``reasoning``: each choice's
    reasoning (a reasoning model's request), as ``reasoning_content`` and ``reasoning``, null
    when the choice had none."""
    choices = []
    for i, text in enumerate(texts):
        choice: dict[str, Any] = {"index": i}
        if chat:
            calls = tool_calls[i] if tool_calls is not None else ()
            choice["message"] = {
                "role": "assistant",
                "content": text if (text or not calls) else None,
                "refusal": None,
                "tool_calls": [tool_call_object(call) for call in calls] if calls and not legacy_functions else None,
            }
            if legacy_functions:
                choice["message"]["function_call"] = (
                    {"name": calls[0].name, "arguments": calls[0].arguments} if calls else None
                )
            if reasoning is not None:
                choice["message"]["reasoning_content"] = choice["message"]["reasoning"] = reasoning[i] or None
        else:
            choice["text"] = text
        choice["logprobs"] = logprobs[i] if logprobs is not None else None
        choice["finish_reason"] = _finish(finish_reasons[i], legacy_functions)
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


class CompletionBuilder:
    """Collects a non-streaming request's choice events into its one response object."""

    def __init__(
        self,
        *,
        chat: bool,
        completion_id: str,
        created: int,
        model: str,
        choices: int,
        logprobs: bool,
        legacy_functions: bool = False,
        reasoning: bool = False,
    ) -> None:
        self._chat = chat
        self._head: dict[str, Any] = {
            "chat": chat,
            "completion_id": completion_id,
            "created": created,
            "model": model,
            "legacy_functions": legacy_functions,
        }
        self._texts: list[list[str]] = [[] for _ in range(choices)]
        self._logprobs: list[list[Any]] | None = [[] for _ in range(choices)] if logprobs else None
        self._calls: list[list[ToolCallOut]] | None = None
        self._reasoning: list[list[str]] | None = [[] for _ in range(choices)] if reasoning else None

    def add(self, events: Sequence[ChoiceEvent]) -> None:
        texts, logprobs, reasoning = self._texts, self._logprobs, self._reasoning
        for event in events:
            texts[event.index].append(event.text)
            if reasoning is not None and event.reasoning:
                reasoning[event.index].append(event.reasoning)
            if logprobs is not None and event.logprobs is not None:
                logprobs[event.index].append(event.logprobs)
            if event.tool_calls is not None:
                if self._calls is None:
                    self._calls = [[] for _ in texts]
                calls = self._calls[event.index]
                for call in event.tool_calls:
                    if call.opens:
                        calls.append(call)
                    else:  # a piece of the last call's arguments
                        calls[-1] = calls[-1]._replace(arguments=calls[-1].arguments + call.arguments)

    def build(self, finish_reasons: Sequence[str | None], usage: Usage) -> dict[str, Any]:
        logprobs = None if self._logprobs is None else [self._join_logprobs(parts) for parts in self._logprobs]
        return completion_object(
            **self._head,
            texts=["".join(parts) for parts in self._texts],
            finish_reasons=finish_reasons,
            logprobs=logprobs,
            usage=usage,
            tool_calls=self._calls,
            reasoning=None if self._reasoning is None else ["".join(parts) for parts in self._reasoning],
        )

    def _join_logprobs(self, parts: list[Any]) -> Any:
        if self._chat:
            return {"content": [item for part in parts for item in part["content"]]}
        return merge_completion_logprobs(parts)
