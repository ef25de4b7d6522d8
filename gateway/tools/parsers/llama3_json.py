"""``llama3_json``: Llama 3.1-3.3 (and Llama 4 with its JSON template) custom-tool calls.

The output, after optional whitespace and ``<|python_tag|>``, is ``{"name": ..., "parameters":
{...}}`` (``arguments`` is accepted too); several calls are separated by ``;``. Llama 4's own
template renders past calls after ``<|python_start|>...<|python_end|>``, so those markers are
skipped around the calls as well. Output that starts any other way is content, streamed at
once; an object is complete when its braces balance, and only then parsed.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.tools.calls import call_from_object, load_json
from gateway.tools.scan import could_open_object
from gateway.tools.stream import LeadingParser
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

    def _parse(self, text: str) -> Sequence[ParsedCall] | None:
        call = call_from_object(load_json(text), self._tool_names)
        return None if call is None else (call,)
