"""Anthropic's Messages API: its stream events and message object, built from the core's choice events.

One ``MessageEncoder`` per message follows its one choice as the core reports it and says it both
ways: the SSE events of a stream (bytes) and, at the end, the message object (a dict), so a
streamed message and a non-streamed one have the same content by construction (the non-streaming
path runs the same encoder and keeps only the object).

Content blocks, in the order they begin: ``thinking`` (a reasoning model's reasoning, when the
request enabled thinking), ``text``, and one ``tool_use`` per call. A block stays open while the
choice keeps saying the same kind of thing and closes when another kind begins. A thinking block
ends with a ``signature_delta``: its text sealed (``reasoning.seal``), so a client that sends the
block back, even emptied (``display: "omitted"``, where no ``thinking_delta`` is sent and the
block's text is empty), gives the next turn the model's own thinking, unaltered. Events, per
Anthropic's sequence: ``message_start``, per block ``content_block_start``,
``content_block_delta`` (``text_delta``, ``thinking_delta``, ``signature_delta``,
``input_json_delta`` with the call's arguments as they stream), ``content_block_stop``, then
``message_delta`` (stop reason, usage, and ``context_management`` when the request edited its
context) and ``message_stop``; after an error, one ``error`` event with Anthropic's error body.

The per-token event (a ``text_delta`` of the open text block) is pre-encoded: one ``orjson.dumps``
of the text and one concatenation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.assemble import ChoiceEvent, Usage
from gateway.core.toolcalls import ToolCallOut
from gateway.reasoning.seal import ReasoningSeal

Framing = tuple[bytes, bytes]
EventFraming = Callable[[str], Framing]
"""An event type → what goes before and after its JSON on the wire (the HTTP edge's SSE)."""

DELTA = "content_block_delta"


@dataclass(frozen=True, slots=True)
class MessageOptions:
    """What the request decided about the message beyond its content."""

    seal: ReasoningSeal | None = None
    """Seals thinking into its block's ``signature``; None: the sha256 of the text (tests)."""
    show_thinking: bool = True
    """``thinking.display`` is not ``omitted``."""
    window_limited: bool = False
    """``max_tokens`` was lowered to the room the context leaves: running out of it is
    ``model_context_window_exceeded``, not ``max_tokens``."""
    context_management: dict[str, Any] | None = None
    """``{"applied_edits": [...]}`` when the request asked for context editing."""


def stop_reason(finish_reason: str | None, stop_sequence: str | None, called: bool, window: bool = False) -> str:
    """The core's finish reason → Anthropic's ``stop_reason``."""
    if finish_reason == "length":
        return "model_context_window_exceeded" if window else "max_tokens"
    if finish_reason == "tool_calls" or called:
        return "tool_use"
    if stop_sequence is not None:
        return "stop_sequence"
    return "end_turn"


def message_usage(usage: Usage) -> dict[str, Any]:
    """Usage as Anthropic names it (cache reads where the engine reports reused KV blocks)."""
    cached = usage.cached_tokens or 0
    return {  # Anthropic's input_tokens leave out what was read from the cache
        "input_tokens": usage.prompt_tokens - cached,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def thinking_signature(thinking: str) -> str:
    return hashlib.sha256(thinking.encode()).hexdigest()


def tool_use_id(call_id: str) -> str:
    """The core's ``call_<hex>`` → Anthropic's ``toolu_<hex>``."""
    return "toolu_" + call_id.removeprefix("call_")


class MessageEncoder:
    """One message: its events (bytes) as the choice speaks, and its object when it ends."""

    __slots__ = (
        "_head",
        "_framing",
        "_delta_prefix",
        "_delta_tail",
        "content",
        "_kind",
        "_parts",
        "_called",
        "_options",
    )

    def __init__(
        self, message_id: str, model: str, framing: EventFraming, options: MessageOptions | None = None
    ) -> None:
        self._head: dict[str, Any] = {"id": message_id, "type": "message", "role": "assistant", "model": model}
        self._options = options or MessageOptions()
        self._framing = framing
        prefix, suffix = framing(DELTA)
        self._delta_prefix = prefix + b'{"type":"content_block_delta","index":'
        self._delta_tail = b"}}" + suffix
        self.content: list[dict[str, Any]] = []
        """The blocks so far (an open block's text is filled in when it closes)."""
        self._kind: str | None = None
        """The open block's type, None when none is open."""
        self._parts: list[str] = []
        """The open block's text (or a call's arguments) so far."""
        self._called = False

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        prefix, suffix = self._framing(kind)
        return prefix + orjson.dumps({"type": kind, **fields}) + suffix

    def opening(self, input_tokens: int) -> bytes:
        """``message_start``: the message with no content yet."""
        usage = message_usage(Usage(input_tokens, 0))
        message: dict[str, Any] = {
            **self._head,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return self._event("message_start", {"message": message})

    def events(self, events: Sequence[ChoiceEvent]) -> bytes:
        """The events of one step of the generation (one choice: index 0)."""
        if len(events) == 1:
            event = events[0]
            if event.text and self._kind == "text" and event.tool_calls is None and not event.reasoning:
                return self._text_delta(event.text)  # the per-token case
        out = []
        for event in events:
            if event.reasoning:
                if self._kind != "thinking":
                    out.append(self._open({"type": "thinking", "thinking": "", "signature": ""}))
                self._parts.append(event.reasoning)
                if self._options.show_thinking:
                    delta = {"type": "thinking_delta", "thinking": event.reasoning}
                    out.append(self._event(DELTA, {"index": len(self.content) - 1, "delta": delta}))
            if event.text:
                if self._kind != "text":
                    out.append(self._open({"type": "text", "text": ""}))
                out.append(self._text_delta(event.text))
            for call in event.tool_calls or ():
                out.append(self._tool_use(call))
        return b"".join(out)

    def _text_delta(self, text: str) -> bytes:
        self._parts.append(text)
        return (
            self._delta_prefix
            + b"%d" % (len(self.content) - 1)
            + b',"delta":{"type":"text_delta","text":'
            + orjson.dumps(text)
            + self._delta_tail
        )

    def _open(self, block: dict[str, Any]) -> bytes:
        out = self._close()
        self.content.append(block)
        self._kind = block["type"]
        return out + self._event("content_block_start", {"index": len(self.content) - 1, "content_block": block})

    def _close(self) -> bytes:
        """Close the open block (its text filled in; a thinking block signed first)."""
        kind = self._kind
        if kind is None:
            return b""
        index = len(self.content) - 1
        block = self.content[index] = dict(self.content[index])
        text = "".join(self._parts)
        self._parts = []
        self._kind = None
        out = b""
        if kind == "text":
            block["text"] = text
        elif kind == "thinking":
            seal = self._options.seal
            block["thinking"] = text if self._options.show_thinking else ""
            block["signature"] = seal.seal(text, self._head["model"]) if seal else thinking_signature(text)
            delta = {"type": "signature_delta", "signature": block["signature"]}
            out = self._event(DELTA, {"index": index, "delta": delta})
        else:
            block["input"] = call_input(text)
        return out + self._event("content_block_stop", {"index": index})

    def _tool_use(self, call: ToolCallOut) -> bytes:
        """A call's events: its block's start when it opens, an ``input_json_delta`` per piece of
        its arguments, its block's stop when it closes (a whole call: all of them at once)."""
        out = b""
        if call.opens or self._kind != "tool_use":
            self._called = True
            out = self._open({"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": {}})
        if call.arguments:
            self._parts.append(call.arguments)
            delta = {"type": "input_json_delta", "partial_json": call.arguments}
            out += self._event(DELTA, {"index": len(self.content) - 1, "delta": delta})
        if call.closes:
            out += self._close()
        return out

    def closing(
        self, finish_reason: str | None, stop_sequence: str | None, usage: Usage
    ) -> tuple[bytes, dict[str, Any]]:
        """The last events (the open block closed, ``message_delta``, ``message_stop``) and the
        message object."""
        out = self._close()
        options = self._options
        reason = stop_reason(finish_reason, stop_sequence, self._called, options.window_limited)
        matched = stop_sequence if reason == "stop_sequence" else None
        delta: dict[str, Any] = {
            "delta": {"stop_reason": reason, "stop_sequence": matched},
            "usage": {"output_tokens": usage.completion_tokens},
        }
        if options.context_management is not None:
            delta["context_management"] = options.context_management
        out += self._event("message_delta", delta) + self._event("message_stop", {})
        message: dict[str, Any] = {
            **self._head,
            "content": self.content,
            "stop_reason": reason,
            "stop_sequence": matched,
            "usage": message_usage(usage),
        }
        if options.context_management is not None:
            message["context_management"] = options.context_management
        return out, message


def call_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object Anthropic's ``input`` is (the core releases valid JSON;
    anything else, or no arguments, is an empty input)."""
    if not arguments:
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def error_event(body: dict[str, Any], framing: EventFraming) -> bytes:
    """The ``error`` event that ends a stream which failed after its headers were sent."""
    prefix, suffix = framing("error")
    return prefix + orjson.dumps(body) + suffix


def count_object(input_tokens: int) -> dict[str, Any]:
    """What ``POST /v1/messages/count_tokens`` answers."""
    return {"input_tokens": input_tokens}
