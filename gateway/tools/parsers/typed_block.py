"""What the XML-ish formats with typed values share: a ``<tool_call>`` block per call, whose
arguments stream once the block names one of the tools (Qwen3-Coder's, GLM's).

A subclass's ``_head`` opens the call (``_open_typed``) or sends the block to be read whole
(``_WHOLE``: ``_parse`` at the first ``</tool_call>``, content when it is no call). Once open,
``_streaming`` reads the call's parameters, each ``PARAM_OPEN`` (its key and where its value
begins read by the subclass's ``_param_head``) then a value (the subclass's ``_value``), up to
``CALL_END``, sending what the text settles (``TypedObject`` writes the JSON) and ending the
call at ``_end``. From the opening on the block is a call: its rest, to ``</tool_call>`` or
the end of the output, is not read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from gateway.tools.params import ParamType, ToolParams, TypedObject, params_by_tool
from gateway.tools.parsers.hermes import CLOSE, OPEN
from gateway.tools.scan import partial_marker, skip_space
from gateway.tools.stream import ArgumentsBlockParser
from gateway.tools.types import ParsedCall

HEAD, WHOLE, PARAM, IN_VALUE, TAIL = range(5)


class TypedBlockParser(ArgumentsBlockParser):
    MARKER = OPEN
    CLOSE = CLOSE
    TRIGGER = "<"
    PARAM_OPEN: ClassVar[str]
    """What opens a parameter (its key follows)."""
    CALL_END: ClassVar[str]
    """What ends the call's parameters: its own tag, or the block's ``CLOSE``."""
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

    def _param_head(self, pos: int) -> tuple[str, int] | None:
        """At a ``PARAM_OPEN`` at ``pos``: (its key, where its value's text begins, or -1 when
        the head is out of place); None while the text ends inside the head."""
        raise NotImplementedError

    def _value(self, final: bool) -> None:
        """The open value: its settled text sent and, once it closed, its end (the stage is then
        ``PARAM``, or ``TAIL`` when the call ended inside the value)."""
        raise NotImplementedError

    def _streaming(self, final: bool) -> bool:
        """Send what the open call's text settles; True once the call ended (``TAIL``)."""
        buf, size = self._buf, len(self._buf)
        typed = self._object
        assert typed is not None
        while True:
            if self._stage == IN_VALUE:
                self._value(final)
                if self._stage != PARAM:
                    return self._stage == TAIL
                continue
            pos = skip_space(buf, self._pos)
            if buf.startswith(self.CALL_END, pos):
                self._send("}")
                # The block's own close is left for ``_close`` to find; a call's tag is passed.
                return self._end(pos if self.CALL_END == CLOSE else pos + len(self.CALL_END))
            if buf.startswith(self.PARAM_OPEN, pos):
                head = self._param_head(pos)
                if head is None:
                    return self._end(pos) if final else False
                key, value_at = head
                if value_at < 0 or not typed.begin(key):
                    return self._end(pos)
                self._stage = IN_VALUE
                self._text_at = self._sent = self._search = value_at
                continue
            if not final and (pos == size or partial_marker(buf, pos, (self.PARAM_OPEN, self.CALL_END))):
                return False
            return self._end(pos)

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
