"""``forced_required``: ``tool_choice: "required"``; the output is an array of calls.

Structured outputs make the model write ``[{"name": ..., "parameters": {...}}, ...]`` with at
least one element, the shape vLLM enforces for ``required`` (``gateway.tools.schemas`` builds
that schema). Calls stream as ``CallArray`` reads them: an element that names one of the tools
first opens its call at once and its arguments follow as they settle; from the first call on
the array is calls, and what turns malformed ends them there. An array whose first element is
no valid call is content, whole.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.tools.calls import calls_from_array, load_json
from gateway.tools.scan import could_open_object, skip_space
from gateway.tools.stream import LeadingParser
from gateway.tools.types import ParsedCall


class ForcedRequiredParser(LeadingParser):
    OPENER = "["
    CALL_ARRAY = True
    __slots__ = ()

    def _could_open(self, text: str, start: int) -> bool | None:
        """Only ``[`` then an object can be a call array."""
        return could_open_object(text, skip_space(text, start + 1), allow_empty=False)

    def _parse(self, text: str) -> Sequence[ParsedCall] | None:
        return calls_from_array(load_json(text), self._tool_names)
