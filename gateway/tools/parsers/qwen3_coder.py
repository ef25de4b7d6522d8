"""``qwen3_coder``: Qwen3-Coder's and Qwen 3.5's XML calls, one ``<tool_call>`` block per call.

::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Values are bare text (one newline after ``<parameter=...>`` and one before ``</parameter>`` are
the layout, not the value), typed by the function's schema (``params.qwen3_value``). A value's
``</parameter>`` is the one followed (after whitespace) by the next ``<parameter=`` or by
``</function>``, so a value that quotes that tag in code still parses.

Arguments stream: once ``<function=NAME>`` names one of the tools, the call opens, and its
arguments follow as they settle (``params.TypedObject``): a string parameter's value (one the
schema types as a string, or does not list) a piece at a time, held only where it could still
be the layout newline or its closing tag; any other value once whole. From the opening on the
block is a call: anything out of place (text outside the tags, a repeated parameter), the
block's ``</tool_call>`` (even inside a value) or the end of the output ends it with what was
sent, and the rest of the block, to ``</tool_call>``, is not read. A block that does not open
so ends at the first ``</tool_call>`` and is parsed whole: a block with anything else in it (an
unknown function, no ``<function=``) is content exactly as written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.tools.calls import dump_arguments
from gateway.tools.params import ToolParams, TypedObject, params_by_tool, qwen3_value
from gateway.tools.parsers.hermes import CLOSE, OPEN
from gateway.tools.scan import held_from, skip_space
from gateway.tools.stream import ArgumentsBlockParser
from gateway.tools.types import ParsedCall

FUNCTION = "<function="
FUNCTION_END = "</function>"
PARAMETER = "<parameter="
PARAMETER_END = "</parameter>"


def _value_end(body: str, start: int) -> int:
    """Index of the ``</parameter>`` that ends the value at ``start``, or -1."""
    end = body.find(PARAMETER_END, start)
    while end != -1:
        after = skip_space(body, end + len(PARAMETER_END))
        if body.startswith(PARAMETER, after) or body.startswith(FUNCTION_END, after):
            return end
        end = body.find(PARAMETER_END, end + 1)
    return -1


_HEAD, _WHOLE, _PARAM, _VALUE, _TAIL = range(5)


def _partial(text: str, pos: int, markers: tuple[str, ...]) -> bool:
    rest = text[pos:]
    return any(len(rest) < len(marker) and marker.startswith(rest) for marker in markers)


def _layout_trimmed(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    return value[:-1] if value.endswith("\n") else value


class Qwen3CoderParser(ArgumentsBlockParser):
    MARKER = OPEN
    CLOSE = CLOSE
    TRIGGER = "<"
    __slots__ = ("_object", "_params", "_pos", "_search", "_sent", "_stage", "_text_at")

    def __init__(self, tool_names: frozenset[str], params: ToolParams = ()) -> None:
        super().__init__(tool_names)
        self._params = params_by_tool(params)
        self._object: TypedObject | None = None
        self._stage = _HEAD
        self._pos = 0
        """Where the next parameter (or ``</function>``) is looked for."""
        self._text_at = 0
        """Where the open parameter's text begins (just past its ``>``)."""
        self._sent = 0
        """How far the open string value was sent."""
        self._search = 0
        """Where the open value's closing tag is looked for next."""

    def _begin(self) -> None:
        super()._begin()
        self._object, self._stage = None, _HEAD

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        if self._stage == _HEAD:
            self._head(final)
            if self._stage == _HEAD:
                return None
        if self._stage == _WHOLE:
            buf = self._buf
            end = self._find_close(CLOSE)
            if end == -1:
                return None
            call = self._parse(buf[self._open_end : end])
            return end + len(CLOSE), None if call is None else (call,)
        if self._stage != _TAIL and not self._streaming(final):
            return None
        end = self._find_close(CLOSE, self._pos)
        if end == -1:
            return (len(self._buf), []) if final else None
        return end + len(CLOSE), []

    def _head(self, final: bool) -> None:
        """Open the call once ``<function=NAME>`` names one of the tools; else read whole."""
        buf = self._buf
        pos = skip_space(buf, self._open_end)
        if not buf.startswith(FUNCTION, pos):
            if final or not (pos == len(buf) or _partial(buf, pos, (FUNCTION,))):
                self._stage = _WHOLE
            return
        name_end = buf.find(">", pos)
        if name_end == -1:
            if final:
                self._stage = _WHOLE
            return
        name = buf[pos + len(FUNCTION) : name_end].strip()
        if name not in self._tool_names:
            self._stage = _WHOLE
            return
        self._parts.append(ParsedCall(name, "", closes=False))
        self._parts.append(ParsedCall("", "{", opens=False, closes=False))
        self._object = TypedObject(self._params.get(name, {}), qwen3_value, untyped_string=True)
        self._stage, self._pos = _PARAM, name_end + 1

    def _streaming(self, final: bool) -> bool:
        """Send what the open call's text settles; True once the call closed (``_TAIL``)."""
        buf, size = self._buf, len(self._buf)
        typed = self._object
        assert typed is not None
        while True:
            if self._stage == _VALUE:
                self._value(final)
                if self._stage != _PARAM:
                    return self._stage == _TAIL
                continue
            pos = skip_space(buf, self._pos)
            if buf.startswith(FUNCTION_END, pos):
                self._send("}")
                return self._end(pos + len(FUNCTION_END))
            if buf.startswith(PARAMETER, pos):
                key_end = buf.find(">", pos)
                if key_end == -1:
                    return self._end(pos) if final else False
                if not typed.begin(buf[pos + len(PARAMETER) : key_end].strip()):
                    return self._end(pos)
                self._stage = _VALUE
                self._text_at = self._sent = self._search = key_end + 1
                continue
            if not final and (pos == size or _partial(buf, pos, (PARAMETER, FUNCTION_END))):
                return False
            return self._end(pos)

    def _value(self, final: bool) -> None:
        """The open value: its settled text sent (a string) and, once it closed, its end (the
        stage is then ``_PARAM``, or ``_TAIL`` when the call ended inside the value)."""
        buf, start = self._buf, self._text_at
        typed = self._object
        assert typed is not None
        if start == len(buf):
            if final:
                self._end(start)
            return
        text_at = start + 1 if buf[start] == "\n" else start
        end, hold = self._scan(buf)
        close = self._find_close(CLOSE, start)
        if close != -1 and (end == -1 or close < end):  # the block ends inside the value: cut
            limit = close - 1 if close > text_at and buf[close - 1] == "\n" else close
            if typed.streams and limit > max(self._sent, text_at):
                self._send(typed.text(buf[max(self._sent, text_at) : limit]))
            self._end(close)
            return
        if end == -1:
            if final:
                self._end(start)
                return
            if typed.streams:
                hold = min(hold, held_from(buf, CLOSE))
                limit = hold - 1 if hold > text_at and buf[hold - 1] == "\n" else hold
                if limit > max(self._sent, text_at):
                    self._send(typed.text(buf[max(self._sent, text_at) : limit]))
                    self._sent = limit
            return
        value_end = end - 1 if end > text_at and buf[end - 1] == "\n" else end
        piece = typed.text(buf[max(self._sent, text_at) : value_end]) if typed.streams else ""
        self._send(piece + typed.end(buf[text_at:value_end]))
        self._stage, self._pos = _PARAM, end + len(PARAMETER_END)

    def _scan(self, buf: str) -> tuple[int, int]:
        """(where the open value's ``</parameter>`` begins, or -1; where text may still be that
        tag, so nothing from there is sent). Resumes where the last scan stopped."""
        pos = self._search
        while True:
            at = buf.find(PARAMETER_END, pos)
            if at == -1:
                self._search = max(pos, len(buf) - len(PARAMETER_END) + 1)
                return -1, max(held_from(buf, PARAMETER_END), self._text_at)
            after = skip_space(buf, at + len(PARAMETER_END))
            if buf.startswith(PARAMETER, after) or buf.startswith(FUNCTION_END, after):
                return at, at
            if after == len(buf) or _partial(buf, after, (PARAMETER, FUNCTION_END)):
                self._search = at
                return -1, at
            pos = at + 1

    def _send(self, piece: str) -> None:
        if piece:
            self._parts.append(ParsedCall("", piece, opens=False, closes=False))

    def _end(self, pos: int) -> bool:
        """Close the call (``</function>`` seen, or something out of place at ``pos``: what was
        sent stays); the block runs on to ``</tool_call>``."""
        self._parts.append(ParsedCall("", "", opens=False, closes=True))
        self._stage, self._pos = _TAIL, pos
        return True

    def _parse(self, body: str) -> ParsedCall | None:
        """The call in one block's text, or None when anything in it is out of place."""
        pos = skip_space(body, 0)
        if not body.startswith(FUNCTION, pos):
            return None
        name_end = body.find(">", pos)
        name = body[pos + len(FUNCTION) : name_end].strip()
        if name_end == -1 or name not in self._tool_names:
            return None
        types = self._params.get(name, {})
        arguments: dict[str, Any] = {}
        pos = name_end + 1
        while True:
            pos = skip_space(body, pos)
            if body.startswith(FUNCTION_END, pos):
                break
            if not body.startswith(PARAMETER, pos):
                return None
            key_end = body.find(">", pos)
            value_end = _value_end(body, key_end + 1) if key_end != -1 else -1
            if value_end == -1:
                return None
            key = body[pos + len(PARAMETER) : key_end].strip()
            arguments[key] = qwen3_value(_layout_trimmed(body[key_end + 1 : value_end]), types.get(key))
            pos = value_end + len(PARAMETER_END)
        if skip_space(body, pos + len(FUNCTION_END)) != len(body):
            return None
        dumped = dump_arguments(arguments)
        return None if dumped is None else ParsedCall(name, dumped)
