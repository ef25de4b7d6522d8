"""The Responses API's stream events and Response object, built from the core's choice events.

One ``ResponseEncoder`` per response follows its one choice as the core reports it and says it
both ways: the SSE events of a stream (bytes) and, at the end, the Response object (a dict), so a
streamed response and a non-streamed one have the same output by construction (the non-streaming
path runs the same encoder and keeps only the object).

The items, in the order they begin: a ``reasoning`` item holding a reasoning model's reasoning
(opened at its first reasoning text, closed when the answer or a call begins; its text streams as
``response.reasoning_text.delta``), one ``message`` item holding all of the choice's text (opened
at its first text, closed at the end, so calls in between do not split it), and one
``function_call`` item per tool call, whole as soon as the core releases the call (added,
arguments delta, arguments done, done), or piece by piece where its arguments stream (an arguments
delta per piece). A response that said nothing still gets an empty message,
so ``output`` is never empty. Events, per OpenAI's sequence: ``response.created``,
``response.in_progress``, the items' events, then ``response.completed`` (or
``response.incomplete`` at the token cap, ``response.failed`` after an error), every one with the
next ``sequence_number`` from 0. A background response begins with ``response.created`` and
``response.queued`` (its object ``queued``), and says ``response.in_progress`` once it has a slot.

The per-token event (``response.output_text.delta``) is pre-encoded per item: one ``orjson.dumps``
of the text and one concatenation. Everything else happens a few times per response.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.core.assemble import ChoiceEvent, Usage
from gateway.core.toolcalls import ToolCallOut
from gateway.openai.jsonbytes import dumps
from gateway.plan.responses_input import item_id_of
from gateway.reasoning.seal import ReasoningSeal

Framing = tuple[bytes, bytes]
EventFraming = Callable[[str], Framing]
"""An event type → what goes before and after its JSON on the wire (the HTTP edge's SSE)."""

DELTA = "response.output_text.delta"
INCOMPLETE_AT_CAP = "max_output_tokens"
CLIENT_DISCONNECTED = "client_disconnected"
"""``incomplete_details.reason`` of a stored response whose client left before it ended (the
gateway's own value: OpenAI's reasons do not cover it)."""


def response_usage(usage: Usage) -> dict[str, Any]:
    """Usage as the Responses API names it (cached tokens where the engine reports them)."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens or 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        "total_tokens": usage.total_tokens,
    }


@dataclass(frozen=True, slots=True)
class ResponseOptions:
    """What the request decided about its items beyond their content."""

    seal: ReasoningSeal | None = None
    """Set (``include: ["reasoning.encrypted_content"]``): each reasoning item carries its text
    sealed, for a client that keeps no store to send back."""
    summarize: bool = False
    """``reasoning.summary`` set: the reasoning item's ``summary`` carries its text too (one
    ``summary_text`` part, streamed as ``response.reasoning_summary_text.delta``)."""
    namespaced: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """A call's name as the model knows it → the namespace and name it goes back under."""


def _summary_part(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def _reasoning_part(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


class ResponseEncoder:
    """One response: its events (bytes) as the choice speaks, and its object when it ends."""

    __slots__ = (
        "_head",
        "_framing",
        "_delta_prefix",
        "_delta_tail",
        "_seq",
        "output",
        "_message",
        "_message_index",
        "_texts",
        "_thought",
        "_thought_index",
        "_thoughts",
        "_call_index",
        "_options",
        "_queued",
    )

    def __init__(self, head: dict[str, Any], framing: EventFraming, options: ResponseOptions | None = None) -> None:
        self._head = head
        self._options = options or ResponseOptions()
        self._framing = framing
        prefix, suffix = framing(DELTA)
        self._delta_prefix = prefix + b'{"type":"' + DELTA.encode() + b'","sequence_number":'
        self._delta_tail = b',"logprobs":[]}' + suffix
        self._seq = 0
        self.output: list[dict[str, Any]] = []
        """The items so far, by ``output_index`` (an open message's is completed when it closes)."""
        self._message: bytes | None = None
        """The open message item's pre-encoded delta middle (its id and indices), None when closed."""
        self._message_index = -1
        self._texts: list[str] = []
        self._thought: dict[str, Any] | None = None
        """The open reasoning item's ids (item, output and content index), None when closed."""
        self._thought_index = -1
        self._thoughts: list[str] = []
        self._call_index = -1
        """The output index of the call whose pieces are arriving."""
        self._queued = False
        """``queued`` said ``response.created``: ``opening`` says only ``response.in_progress``."""

    # -- events --------------------------------------------------------------------------------

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        prefix, suffix = self._framing(kind)
        seq = self._seq
        self._seq = seq + 1
        return prefix + dumps({"type": kind, "sequence_number": seq, **fields}) + suffix

    def opening(self) -> bytes:
        """``response.created`` and ``response.in_progress``: the id is the client's from here on
        (after ``queued``: ``response.in_progress`` alone, as the generation starts)."""
        in_progress = {"response": self.snapshot("in_progress")}
        if self._queued:
            return self._event("response.in_progress", in_progress)
        return self._event("response.created", in_progress) + self._event("response.in_progress", in_progress)

    def queued(self) -> bytes:
        """A background response's first events, before it has a slot: ``response.created`` and
        ``response.queued``, both with the ``queued`` object."""
        self._queued = True
        snapshot = self.snapshot("queued")
        return self._event("response.created", {"response": snapshot}) + self._event(
            "response.queued", {"response": snapshot}
        )

    def snapshot(self, status: str) -> dict[str, Any]:
        """The object before any output (``queued``, ``in_progress``)."""
        return {**self._head, "status": status}

    def events(self, events: Sequence[ChoiceEvent]) -> bytes:
        """The events of one step of the generation (Responses has one choice: index 0)."""
        if len(events) == 1:
            event = events[0]
            if event.text and self._message is not None and event.tool_calls is None and not event.reasoning:
                return self._delta(event.text)  # the per-token case
        out = []
        for event in events:
            if event.reasoning:
                if self._thought is None:
                    out.append(self._open_reasoning())
                out.append(self._reasoning_delta(event.reasoning))
            if self._thought is not None and (event.text or event.tool_calls):
                out.append(self._close_reasoning("completed"))
            if event.text:
                if self._message is None:
                    out.append(self._open_message())
                out.append(self._delta(event.text))
            for call in event.tool_calls or ():
                out.append(self._function_call(call))
        return b"".join(out)

    def _delta(self, text: str) -> bytes:
        seq = self._seq
        self._seq = seq + 1
        self._texts.append(text)
        middle = self._message
        assert middle is not None
        return self._delta_prefix + b"%d" % seq + middle + orjson.dumps(text) + self._delta_tail

    def _open_message(self) -> bytes:
        item_id = item_id_of("msg", self._head["id"], len(self.output))
        index = len(self.output)
        item: dict[str, Any] = {
            "id": item_id,
            "type": "message",
            "status": "in_progress",
            "content": [],
            "role": "assistant",
        }
        added = self._event("response.output_item.added", {"output_index": index, "item": item})
        part = self._event(
            "response.content_part.added",
            {"item_id": item_id, "output_index": index, "content_index": 0, "part": _text_part("")},
        )
        self.output.append(item)
        self._message_index = index
        self._message = b',"item_id":"' + item_id.encode() + b'","output_index":%d,"content_index":0,"delta":' % index
        return added + part

    def _open_reasoning(self) -> bytes:
        index = len(self.output)
        item_id = item_id_of("rs", self._head["id"], index)
        item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": [], "content": []}
        item["status"] = "in_progress"
        added = self._event("response.output_item.added", {"output_index": index, "item": item})
        self._thought = {"item_id": item_id, "output_index": index, "content_index": 0}
        part = self._event("response.content_part.added", {**self._thought, "part": _reasoning_part("")})
        if self._options.summarize:
            summary = {"item_id": item_id, "output_index": index, "summary_index": 0, "part": _summary_part("")}
            part += self._event("response.reasoning_summary_part.added", summary)
        self.output.append(item)
        self._thought_index = index
        return added + part

    def _reasoning_delta(self, text: str) -> bytes:
        self._thoughts.append(text)
        ids = self._thought
        assert ids is not None
        out = self._event("response.reasoning_text.delta", {**ids, "delta": text})
        if self._options.summarize:
            summary = {"item_id": ids["item_id"], "output_index": ids["output_index"], "summary_index": 0}
            out += self._event("response.reasoning_summary_text.delta", {**summary, "delta": text})
        return out

    def _close_reasoning(self, status: str) -> bytes:
        ids = self._thought
        assert ids is not None
        text = "".join(self._thoughts)
        part = _reasoning_part(text)
        out = self._event("response.reasoning_text.done", {**ids, "text": text})
        out += self._event("response.content_part.done", {**ids, "part": part})
        item = self.output[self._thought_index]
        item["status"], item["content"] = status, [part]
        options = self._options
        if options.summarize:
            summary = {"item_id": ids["item_id"], "output_index": ids["output_index"], "summary_index": 0}
            out += self._event("response.reasoning_summary_text.done", {**summary, "text": text})
            out += self._event("response.reasoning_summary_part.done", {**summary, "part": _summary_part(text)})
            item["summary"] = [_summary_part(text)]
        if options.seal is not None:
            item["encrypted_content"] = options.seal.seal(text, self._head["model"])
        self._thought = None
        return out + self._event("response.output_item.done", {"output_index": self._thought_index, "item": item})

    def _close_message(self, status: str) -> bytes:
        index = self._message_index
        item = self.output[index]
        text = "".join(self._texts)
        part = _text_part(text)
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        out = self._event("response.output_text.done", {**ids, "text": text, "logprobs": []})
        out += self._event("response.content_part.done", {**ids, "part": part})
        item["status"], item["content"] = status, [part]
        self._message = None
        return out + self._event("response.output_item.done", {"output_index": index, "item": item})

    def _function_call(self, call: ToolCallOut) -> bytes:
        """A call's events: ``added`` when it opens, an arguments delta per piece, and ``done``
        when it closes (a whole call: all of them at once)."""
        out = b""
        if call.opens:
            index = len(self.output)
            item_id = item_id_of("fc", self._head["id"], index)
            item = {
                "id": item_id,
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": call.id,
                "name": call.name,
            }
            namespaced = self._options.namespaced.get(call.name)
            if namespaced is not None:
                item["namespace"], item["name"] = namespaced
            self.output.append(item)
            self._call_index = index
            out += self._event("response.output_item.added", {"output_index": index, "item": dict(item)})
        index = self._call_index
        item = self.output[index]
        ids = {"item_id": item["id"], "output_index": index}
        if call.arguments:
            item["arguments"] += call.arguments
            out += self._event("response.function_call_arguments.delta", {**ids, "delta": call.arguments})
        if call.closes:
            item["status"] = "completed"
            out += self._event("response.function_call_arguments.done", {**ids, "arguments": item["arguments"]})
            out += self._event("response.output_item.done", {"output_index": index, "item": item})
        return out

    # -- the end ---------------------------------------------------------------------------------

    def closing(self, finish_reason: str | None, usage: Usage) -> tuple[bytes, dict[str, Any]]:
        """The last events (open items closed, then ``response.completed`` or, at the token cap,
        ``response.incomplete``) and the final Response object."""
        capped = finish_reason == "length"
        out = b""
        if self._thought is not None:
            out += self._close_reasoning("incomplete" if capped else "completed")
        if self._message_index == -1 and not any(item["type"] == "function_call" for item in self.output):
            out += self._open_message()
        if self._message is not None:
            out += self._close_message("incomplete" if capped else "completed")
        if capped:
            response = self._final("incomplete", usage, incomplete_details={"reason": INCOMPLETE_AT_CAP})
            return out + self._event("response.incomplete", {"response": response}), response
        response = self._final("completed", usage, completed_at=int(time.time()))
        return out + self._event("response.completed", {"response": response}), response

    def failed(self, error: dict[str, Any], usage: Usage) -> tuple[bytes, dict[str, Any]]:
        """``response.failed`` carrying OpenAI's error object, and the failed Response object."""
        response = self._final("failed", usage, error=error)
        return self._event("response.failed", {"response": response}), response

    def cancelled(self, usage: Usage) -> dict[str, Any]:
        """The object of a background response cancelled before it ended, its output as far as it
        got (no event: OpenAI's stream has none for it; the stream ends)."""
        return self._final("cancelled", usage)

    def cut_off(self, usage: Usage) -> dict[str, Any]:
        """The Response object of a stream whose client left before it ended (no event: nobody
        reads it), for the store."""
        return self._final("incomplete", usage, incomplete_details={"reason": CLIENT_DISCONNECTED})

    def _final(self, status: str, usage: Usage, **fields: Any) -> dict[str, Any]:
        output = self.output
        if self._thought is not None:  # unfinished reasoning, as far as it got
            output = list(output)
            output[self._thought_index] = {
                **output[self._thought_index],
                "status": "incomplete",
                "content": [_reasoning_part("".join(self._thoughts))],
            }
        if self._message is not None:  # an unfinished message, as far as it got
            output = list(output)
            output[self._message_index] = {
                **output[self._message_index],
                "status": "incomplete",
                "content": [_text_part("".join(self._texts))],
            }
        return {**self._head, "status": status, **fields, "output": output, "usage": response_usage(usage)}


def deleted_object(response_id: str) -> dict[str, Any]:
    """What ``DELETE /v1/responses/{id}`` answers."""
    return {"id": response_id, "object": "response", "deleted": True}


def input_item_list(items: list[dict[str, Any]], *, after: str | None, limit: int, order: str) -> dict[str, Any]:
    """One page of a response's input items (OpenAI's cursor list: ``order`` desc puts the last item
    first, ``after`` is the id of the item the page starts after)."""
    ordered = items[::-1] if order == "desc" else items
    start = 0
    if after is not None:
        start = next((position + 1 for position, item in enumerate(ordered) if item.get("id") == after), len(ordered))
    page = ordered[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(ordered),
    }
