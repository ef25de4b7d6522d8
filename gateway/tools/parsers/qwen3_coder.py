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

from typing import Any

from gateway.tools.calls import dump_arguments
from gateway.tools.params import qwen3_value
from gateway.tools.parsers.hermes import CLOSE
from gateway.tools.parsers.typed_block import PARAM, WHOLE, TypedBlockParser
from gateway.tools.scan import held_from, partial_marker, skip_space
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


def _layout_trimmed(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    return value[:-1] if value.endswith("\n") else value


class Qwen3CoderParser(TypedBlockParser):
    PARAM_OPEN = PARAMETER
    CALL_END = FUNCTION_END
    __slots__ = ()

    def _head(self, final: bool) -> None:
        """Open the call once ``<function=NAME>`` names one of the tools; else read whole."""
        buf = self._buf
        pos = skip_space(buf, self._open_end)
        if not buf.startswith(FUNCTION, pos):
            if final or not (pos == len(buf) or partial_marker(buf, pos, (FUNCTION,))):
                self._stage = WHOLE
            return
        name_end = buf.find(">", pos)
        if name_end == -1:
            if final:
                self._stage = WHOLE
            return
        name = buf[pos + len(FUNCTION) : name_end].strip()
        if name not in self._tool_names:
            self._stage = WHOLE
            return
        self._open_typed(name, name_end + 1, qwen3_value, untyped_string=True)

    def _param_head(self, pos: int) -> tuple[str, int] | None:
        """``<parameter=KEY>``; the value's text begins right after it."""
        buf = self._buf
        key_end = buf.find(">", pos)
        if key_end == -1:
            return None
        return buf[pos + len(PARAMETER) : key_end].strip(), key_end + 1

    def _value(self, final: bool) -> None:
        """The open value: its settled text sent (a string) and, once it closed, its end (the
        stage is then ``PARAM``, or ``TAIL`` when the call ended inside the value)."""
        buf, start = self._buf, self._text_at
        typed = self._object
        assert typed is not None
        if start == len(buf):
            if final:
                self._end(start)
            return
        text_at = start + 1 if buf[start] == "\n" else start
        if typed.streams and not final and buf.find("<", max(self._sent, text_at)) == -1:
            size = len(buf)  # no tag can begin in the unsent text: all of it settles but a last newline
            self._send_text(text_at, size - 1 if size > text_at and buf[size - 1] == "\n" else size)
            return
        end, hold = self._scan(buf)
        close = self._find_close(CLOSE, start)
        if close != -1 and (end == -1 or close < end):  # the block ends inside the value: cut
            if typed.streams:
                self._send_text(text_at, close - 1 if close > text_at and buf[close - 1] == "\n" else close)
            self._end(close)
            return
        if end == -1:
            if final:
                self._end(start)
                return
            if typed.streams:
                hold = min(hold, held_from(buf, CLOSE))
                self._send_text(text_at, hold - 1 if hold > text_at and buf[hold - 1] == "\n" else hold)
            return
        value_end = end - 1 if end > text_at and buf[end - 1] == "\n" else end
        piece = typed.text(buf[max(self._sent, text_at) : value_end]) if typed.streams else ""
        self._send(piece + typed.end(buf[text_at:value_end]))
        self._stage, self._pos = PARAM, end + len(PARAMETER_END)

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
            if after == len(buf) or partial_marker(buf, after, (PARAMETER, FUNCTION_END)):
                self._search = at
                return -1, at
            pos = at + 1

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
