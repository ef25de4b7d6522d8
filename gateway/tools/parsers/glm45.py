"""``glm45``: GLM-4.5's and GLM-4.6's calls, one ``<tool_call>`` block per call.

::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

The name runs to the end of its line or to the first ``<arg_key>`` (GLM-4.7 writes them on one
line). Keys and values are stripped of surrounding whitespace, and values typed by the schema as
vLLM's ``glm45`` does (``params.glm_value``: a declared string stays text, anything else is
JSON or a Python literal when it parses as one).

Arguments stream: once the name (ended by a newline or ``<arg_key>``) is one of the tools, the
call opens, and its arguments follow as they settle (``TypedBlockParser``): a value the schema
types as a string a piece at a time (surrounding whitespace, and text that could still be
``</arg_value>``, held), any other value once whole. From the opening on the block is a call:
anything out of place, a repeated key, the block's ``</tool_call>`` (even inside a value) or the
end of the output ends it with what was sent, and the rest of the block is not read. A block
that does not open so ends at the first ``</tool_call>`` and is parsed whole: with anything
else in it, or an unknown function, it is content exactly.
"""

from __future__ import annotations

from typing import Any

from gateway.tools.calls import dump_arguments
from gateway.tools.params import glm_value
from gateway.tools.parsers.hermes import CLOSE
from gateway.tools.parsers.typed_block import PARAM, WHOLE, TypedBlockParser
from gateway.tools.scan import held_from, partial_marker, skip_space
from gateway.tools.types import ParsedCall

KEY, KEY_END = "<arg_key>", "</arg_key>"
VALUE, VALUE_END = "<arg_value>", "</arg_value>"


class Glm45Parser(TypedBlockParser):
    PARAM_OPEN = KEY
    CALL_END = CLOSE
    __slots__ = ()

    def _head(self, final: bool) -> None:
        """Open the call once its name, ended by a newline or ``<arg_key>``, is one of the
        tools; else read whole."""
        buf = self._buf
        start = skip_space(buf, self._open_end)
        cuts = [at for at in (buf.find("\n", start), buf.find(KEY, start), buf.find(CLOSE, start)) if at != -1]
        if not cuts:
            if final:
                self._stage = WHOLE
            return
        pos = min(cuts)
        name = buf[start:pos].strip()
        if buf.startswith(CLOSE, pos) or name not in self._tool_names:
            self._stage = WHOLE  # a call without arguments is whole already
            return
        self._open_typed(name, pos, glm_value, untyped_string=False)

    def _param_head(self, pos: int) -> tuple[str, int] | None:
        """``<arg_key>KEY</arg_key>`` then ``<arg_value>``, whitespace between."""
        buf, size = self._buf, len(self._buf)
        key_end = buf.find(KEY_END, pos)
        value_at = skip_space(buf, key_end + len(KEY_END)) if key_end != -1 else size
        if value_at == size or partial_marker(buf, value_at, (VALUE,)):
            return None
        if not buf.startswith(VALUE, value_at):
            return "", -1
        return buf[pos + len(KEY) : key_end].strip(), value_at + len(VALUE)

    def _value(self, final: bool) -> None:
        """The open value: its settled text sent (a string, stripped) and, once it closed, its
        end (the stage is then ``PARAM``, or ``TAIL`` when the call ended inside the value)."""
        buf, start = self._buf, self._text_at
        typed = self._object
        assert typed is not None
        lead = skip_space(buf, start)
        if typed.streams and not final and buf.find("<", max(self._sent, lead)) == -1:
            self._send_text(lead, self._stripped(lead, len(buf)))  # no tag can begin in the unsent text
            return
        end = buf.find(VALUE_END, self._search)
        close = self._find_close(CLOSE, start)
        if close != -1 and (end == -1 or close < end):  # the block ends inside the value: cut
            if typed.streams:
                self._send_text(lead, self._stripped(lead, close))
            self._end(close)
            return
        if end == -1:
            self._search = max(start, len(buf) - len(VALUE_END) + 1)
            if final:
                self._end(start)
            elif typed.streams:
                hold = min(held_from(buf, VALUE_END), held_from(buf, CLOSE))
                self._send_text(lead, self._stripped(lead, max(hold, lead)))
            return
        stop = self._stripped(lead, end)
        if typed.streams:
            self._send_text(lead, stop)
        self._send(typed.end(buf[lead:stop]))
        self._stage, self._pos = PARAM, end + len(VALUE_END)

    def _stripped(self, lead: int, limit: int) -> int:
        """``limit`` moved back over whitespace (not before ``lead``): trailing whitespace waits,
        since the value is stripped."""
        buf = self._buf
        while limit > lead and buf[limit - 1].isspace():
            limit -= 1
        return limit

    def _parse(self, body: str) -> ParsedCall | None:
        start = skip_space(body, 0)
        line_end = body.find("\n", start)
        key_at = body.find(KEY, start)
        cuts = [at for at in (line_end, key_at) if at != -1]
        pos = min(cuts) if cuts else len(body)
        name = body[start:pos].strip()
        if name not in self._tool_names:
            return None
        types = self._params.get(name, {})
        arguments: dict[str, Any] = {}
        while (pos := skip_space(body, pos)) < len(body):
            if not body.startswith(KEY, pos):
                return None
            key_end = body.find(KEY_END, pos)
            value_at = skip_space(body, key_end + len(KEY_END)) if key_end != -1 else -1
            if value_at == -1 or not body.startswith(VALUE, value_at):
                return None
            value_end = body.find(VALUE_END, value_at)
            if value_end == -1:
                return None
            key = body[pos + len(KEY) : key_end].strip()
            arguments[key] = glm_value(body[value_at + len(VALUE) : value_end].strip(), types.get(key))
            pos = value_end + len(VALUE_END)
        dumped = dump_arguments(arguments)
        return None if dumped is None else ParsedCall(name, dumped)
