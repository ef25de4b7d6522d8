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
the layout, not the value), typed by the function's schema (``params.qwen3_value``). A block
ends at the first ``</tool_call>``, as a hermes block does, so it is complete and only then
parsed. A value's ``</parameter>`` is the one followed (after whitespace) by the next
``<parameter=`` or by ``</function>``, so a value that quotes that tag in code still parses. A
block with anything else in it (text outside the tags, no ``</function>``, an unknown function)
is content exactly as written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.tools.calls import dump_arguments
from gateway.tools.params import ToolParams, params_by_tool, qwen3_value
from gateway.tools.parsers.hermes import CLOSE, OPEN
from gateway.tools.scan import skip_space
from gateway.tools.stream import MarkerParser
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


class Qwen3CoderParser(MarkerParser):
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
