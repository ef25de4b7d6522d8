"""``glm45``: GLM-4.5's and GLM-4.6's calls, one ``<tool_call>`` block per call.

::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

The name runs to the end of its line or to the first ``<arg_key>`` (GLM-4.7 writes them on one
line). Keys and values are stripped of surrounding whitespace, and values typed by the schema as
vLLM's ``glm45`` does (``params.glm_value``: a declared string stays text, anything else is
JSON or a Python literal when it parses as one). A block ends at the first ``</tool_call>`` and is
only then parsed; a block with anything else in it, or an unknown function, is content exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.tools.calls import dump_arguments
from gateway.tools.params import ToolParams, glm_value, params_by_tool
from gateway.tools.parsers.hermes import CLOSE, OPEN
from gateway.tools.scan import skip_space
from gateway.tools.stream import MarkerParser
from gateway.tools.types import ParsedCall

KEY, KEY_END = "<arg_key>", "</arg_key>"
VALUE, VALUE_END = "<arg_value>", "</arg_value>"


class Glm45Parser(MarkerParser):
    MARKER = OPEN
    TRIGGER = "<"
    __slots__ = ("_params",)

    def __init__(self, tool_names: frozenset[str], params: ToolParams = ()) -> None:
        super().__init__(tool_names)
        self._params = params_by_tool(params)

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        buf = self._buf
        end = self._find_close(CLOSE)
        if end == -1:
            return None
        call = self._parse(buf[self._open_end : end])
        return end + len(CLOSE), None if call is None else (call,)

    def _parse(self, body: str) -> ParsedCall | None:
        """The call in one block's text, or None when anything in it is out of place."""
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
