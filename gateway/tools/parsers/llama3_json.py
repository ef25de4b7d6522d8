"""``llama3_json``: Llama 3.1-3.3 (and Llama 4 with its JSON template) custom-tool calls.

The output, after optional whitespace and ``<|python_tag|>``, is ``{"name": ..., "parameters":
{...}}`` (``arguments`` is accepted too); several calls are separated by ``;``. Llama 4's own
template renders past calls after ``<|python_start|>...<|python_end|>``, so those markers are
skipped around the calls as well. Output that starts any other way is content, streamed at
once.

Arguments stream: once an object has said ``{"name": "<one of the tools>", "parameters": {``
(the order Llama's template asks for), the call opens and its arguments follow as they settle
(``LeadingParser``); the object ends where its braces balance, and arguments that turn out
malformed, or are cut off, end the call where they stopped making sense. An object written in
another order is complete when its braces balance, and only then parsed (content when it is no
valid call).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.tools.calls import call_from_object, load_json
from gateway.tools.scan import could_open_object
from gateway.tools.stream import HEADER, LeadingParser
from gateway.tools.types import ParsedCall

PYTHON_TAG = "<|python_tag|>"
PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"


class Llama3JsonParser(LeadingParser):
    OPENER = "{"
    PREFIXES = (PYTHON_TAG, PYTHON_START, PYTHON_END)
    SUFFIXES = (PYTHON_END,)
    SEPARATOR = ";"
    __slots__ = ()

    def _could_open(self, text: str, start: int) -> bool | None:
        """``{Note: ...}`` or a code block's ``{`` is content at once, not held to its ``}``."""
        return could_open_object(text, start, allow_empty=False)

    def _stream_start(self, text: str, start: int) -> tuple[str, int] | None:
        header = HEADER.match(text, start)
        if header is None or header.group(1) not in self._tool_names:
            return None
        return header.group(1), header.end()

    def _parse(self, text: str) -> Sequence[ParsedCall] | None:
        call = call_from_object(load_json(text), self._tool_names)
        return None if call is None else (call,)
