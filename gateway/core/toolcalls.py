"""Tool calls read out of each choice's text as it streams (``plan.tools`` says how).

Runs after stop strings are cut (a stop string ends the text the parser sees, as it ends the
model's output in vLLM) and before anything is encoded. The parser (``gateway.tools``) holds back
only text that could still be markup, so plain content streams as before. A call comes in
pieces: an opening that names it once its markup names a tool and its arguments begin, then its
arguments as they settle (``ParsedCall``; docs/API.md, "Parsers"); or whole, once its markup has
closed and parsed (pythonic lists, and markup that cannot open a call, which lets malformed
output fall back to text exactly). Ids are made here:
``call_`` and 24 hex digits, unique per call, the same on every piece of it.

Finish reasons as OpenAI and vLLM give them: ``tool_calls`` when a choice made a call and the
model stopped by itself; a named ``tool_choice`` keeps ``stop`` (OpenAI answers a forced function
that way); ``length`` stays ``length``.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

from gateway.core.generation_plan import FORCED_NAMED, ToolPlan
from gateway.tools.registry import make_parser
from gateway.tools.types import ParsedCall, ToolCallParser


class ToolCallOut(NamedTuple):
    """A call of one choice, whole or one piece of it (``ParsedCall``: its arguments stream)."""

    index: int  # type: ignore[assignment]  # the call's position in its choice; shadows tuple.index
    id: str
    name: str
    arguments: str
    """The whole arguments, or this piece's part of them."""
    opens: bool = True
    closes: bool = True


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolCallReader:
    """One choice's reader: feeds the parser, numbers the calls, rewrites the finish reason."""

    __slots__ = ("_parser", "_parallel", "_named", "_open", "calls")

    def __init__(self, plan: ToolPlan) -> None:
        self._parser: ToolCallParser = make_parser(plan.parser, plan.tool_names, plan.params)
        self._parallel = plan.parallel
        self._named = plan.parser == FORCED_NAMED
        self.calls = 0
        self._open: tuple[int, str, str] | None = None
        """The call whose pieces are arriving: its index, id and name."""

    def read(self, text: str, finish_reason: str | None) -> tuple[str, tuple[ToolCallOut, ...] | None, str | None]:
        """(content to show now, calls completed now, the finish reason to report)."""
        parser = self._parser
        content, parsed = parser.feed(text) if text else ("", [])
        if finish_reason is not None:
            rest, last = parser.finish()
            content += rest
            parsed = parsed + last if parsed else last
        calls = self._number(parsed) if parsed else None
        return content, calls, self.finish_reason(finish_reason)

    def finish_reason(self, reason: str | None) -> str | None:
        """The backend's finish reason as this choice reports it."""
        if reason == "stop" and self.calls and not self._named:
            return "tool_calls"
        return reason

    def _number(self, parsed: list[ParsedCall]) -> tuple[ToolCallOut, ...] | None:
        out = []
        for call in parsed:
            if call.opens:
                if self.calls and not self._parallel:
                    self._open = None  # parallel_tool_calls false: the first call only
                    continue
                self._open = (self.calls, new_call_id(), call.name)
                self.calls += 1
            elif self._open is None:
                continue  # a piece of a call that was left out
            index, call_id, name = self._open
            out.append(ToolCallOut(index, call_id, name, call.arguments, call.opens, call.closes))
            if call.closes:
                self._open = None
        return tuple(out) or None
