"""What the XML-ish formats with typed values share: a ``<tool_call>`` block per call, whose
arguments stream once the block names one of the tools (Qwen3-Coder's, GLM's).

A subclass's ``_head`` opens the call (``_open_typed``) or sends the block to be read whole
(``_WHOLE``: ``_parse`` at the first ``</tool_call>``, content when it is no call);
``_streaming`` sends what the open call's text settles (``TypedObject`` writes the JSON) and
ends it at ``_end``. From the opening on the block is a call: its rest, to ``</tool_call>`` or
the end of the output, is not read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gateway.tools.params import ParamType, ToolParams, TypedObject, params_by_tool
from gateway.tools.parsers.hermes import CLOSE, OPEN
from gateway.tools.stream import ArgumentsBlockParser
from gateway.tools.types import ParsedCall

HEAD, WHOLE, PARAM, IN_VALUE, TAIL = range(5)


def partial(text: str, pos: int, markers: tuple[str, ...]) -> bool:
    """``text[pos:]`` is a proper beginning of one of ``markers``."""
    rest = text[pos:]
    return any(len(rest) < len(marker) and marker.startswith(rest) for marker in markers)


class TypedBlockParser(ArgumentsBlockParser):
    MARKER = OPEN
    CLOSE = CLOSE
    TRIGGER = "<"
    __slots__ = ("_object", "_params", "_pos", "_search", "_sent", "_stage", "_text_at")

    def __init__(self, tool_names: frozenset[str], params: ToolParams = ()) -> None:
        super().__init__(tool_names)
        self._params = params_by_tool(params)
        self._object: TypedObject | None = None
        self._stage = HEAD
        self._pos = 0
        """Where the next parameter (or the call's end) is looked for."""
        self._text_at = 0
        """Where the open parameter's value text begins."""
        self._sent = 0
        """How far the open string value was sent."""
        self._search = 0
        """Where the open value's closing tag is looked for next."""

    def _begin(self) -> None:
        super()._begin()
        self._object, self._stage = None, HEAD

    def _head(self, final: bool) -> None:
        raise NotImplementedError

    def _streaming(self, final: bool) -> bool:
        """Send what the open call's text settles; True once the call ended (``TAIL``)."""
        raise NotImplementedError

    def _parse(self, body: str) -> ParsedCall | None:
        """The call in one block's text, or None when anything in it is out of place."""
        raise NotImplementedError

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        if self._stage == HEAD:
            self._head(final)
            if self._stage == HEAD:
                return None
        if self._stage == WHOLE:
            buf = self._buf
            end = self._find_close(CLOSE)
            if end == -1:
                return None
            call = self._parse(buf[self._open_end : end])
            return end + len(CLOSE), None if call is None else (call,)
        if self._stage != TAIL and not self._streaming(final):
            return None
        end = self._find_close(CLOSE, self._pos)
        if end == -1:
            return (len(self._buf), []) if final else None
        return end + len(CLOSE), []

    def _open_typed(
        self, name: str, pos: int, typer: Callable[[str, ParamType | None], Any], *, untyped_string: bool
    ) -> None:
        """Open the call to ``name``; its parameters are looked for from ``pos``."""
        self._parts.append(ParsedCall(name, "", closes=False))
        self._parts.append(ParsedCall("", "{", opens=False, closes=False))
        self._object = TypedObject(self._params.get(name, {}), typer, untyped_string=untyped_string)
        self._stage, self._pos = PARAM, pos

    def _send(self, piece: str) -> None:
        if piece:
            self._parts.append(ParsedCall("", piece, opens=False, closes=False))

    def _send_text(self, start: int, limit: int) -> None:
        """Send the open string value's text up to ``limit`` (from ``start``, where it begins)."""
        assert self._object is not None
        start = max(self._sent, start)
        if limit > start:
            self._send(self._object.text(self._buf[start:limit]))
            self._sent = limit

    def _end(self, pos: int) -> bool:
        """Close the call (its end seen, or something out of place at ``pos``: what was sent
        stays); the block runs on to ``</tool_call>``."""
        self._parts.append(ParsedCall("", "", opens=False, closes=True))
        self._stage, self._pos = TAIL, pos
        return True
