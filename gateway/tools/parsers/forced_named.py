"""``forced_named``: ``tool_choice`` names one function; the output is its arguments object.

Structured outputs make the model write exactly the arguments (a JSON object), as vLLM does
for a named tool choice; no name and no markup are generated. Arguments stream: once the output
begins ``{"`` (or is ``{}``) the call opens, and its arguments follow as they settle
(``LeadingParser``), re-dumped, a number that does not fit a float as written. Arguments that
turn malformed or are cut off (``max_tokens``) end the call with what was sent; the rest of the
object is not read. Output that begins any other way is content.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.tools.calls import dump_arguments, load_json, verbatim_object
from gateway.tools.scan import could_open_object
from gateway.tools.stream import LeadingParser
from gateway.tools.types import ParsedCall


class ForcedNamedParser(LeadingParser):
    OPENER = "{"
    VERBATIM_NUMBERS = True
    __slots__ = ("_name",)

    def __init__(self, tool_names: frozenset[str]) -> None:
        if len(tool_names) != 1:
            raise ValueError(f"forced_named takes exactly one tool name, got {sorted(tool_names)}")
        super().__init__(tool_names)
        (self._name,) = tool_names

    def _could_open(self, text: str, start: int) -> bool | None:
        return could_open_object(text, start, allow_empty=True)

    def _stream_start(self, text: str, start: int) -> tuple[str, int] | None:
        return self._name, start  # ``_could_open`` has seen ``{"`` or ``{}``

    def _parse(self, text: str) -> Sequence[ParsedCall] | None:
        arguments = load_json(text)
        dumped = dump_arguments(arguments) if isinstance(arguments, dict) else verbatim_object(text)
        return None if dumped is None else (ParsedCall(self._name, dumped),)
