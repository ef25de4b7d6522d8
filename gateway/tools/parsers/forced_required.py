"""``forced_required``: ``tool_choice: "required"``; the output is an array of calls.

Structured outputs make the model write ``[{"name": ..., "parameters": {...}}, ...]`` with at
least one element, the shape vLLM enforces for ``required`` (``gateway.tools.schemas`` builds
that schema). The array is one block: its calls are returned together when it closes and every
element is a valid call, else the whole output is content.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.tools.calls import calls_from_array, load_json
from gateway.tools.scan import could_open_object, skip_space
from gateway.tools.stream import LeadingParser
from gateway.tools.types import ParsedCall


class ForcedRequiredParser(LeadingParser):
    OPENER = "["
    __slots__ = ()

    def _could_open(self, text: str, start: int) -> bool | None:
        """Only ``[`` then an object can be a call array."""
        return could_open_object(text, skip_space(text, start + 1), allow_empty=False)

    def _parse(self, text: str) -> Sequence[ParsedCall] | None:
        return calls_from_array(load_json(text), self._tool_names)
