"""Where a rendered prompt leaves the reasoning: open, closed, or not told.

Newer chat templates write the reasoning's opening marker into the generation prompt themselves
(Qwen3.5, Qwen3-2507 thinking, GLM-4.5+, DeepSeek-R1-0528: the prompt ends with ``<think>\\n``),
so the model writes only ``reasoning</think>answer``; with thinking off the same templates write
an empty, closed block (``<think>\\n\\n</think>\\n\\n``) and the model answers plainly. What the
output holds therefore depends on the request (its ``chat_template_kwargs``, its messages), and
the prompt is where it shows. vLLM makes the same decision from the prompt's token ids (a scan
back from the prompt's end for the last marker); the gateway reads the prompt's text instead,
since the markers are text it has at hand before tokenizing.

Only the prompt's end counts (whitespace after the marker aside): an opening or closing marker
earlier in the prompt belongs to a past turn (Qwen3 keeps the last turn's reasoning in multi-step
tool calls), to a user's message that quotes a marker, or to a system prompt that describes the
format, and none of these says how the answer starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

_TAIL = 256
"""Characters from the prompt's end that are looked at: markers are short, and trailing
whitespace after one is a few newlines; a bound keeps the check O(1) for a long prompt."""


class PromptReasoning(Enum):
    """What a rendered prompt says about the reasoning its answer starts in."""

    OPEN = "open"
    """The prompt ends inside an open block: the output starts inside the reasoning."""
    CLOSED = "closed"
    """The prompt ends with a closed block (thinking off): the output is all answer."""


def prompt_reasoning(prompt: str, starts: Sequence[str], ends: Sequence[str]) -> PromptReasoning | None:
    """OPEN when the prompt ends with an opening marker, CLOSED when it ends with a closing one
    (after trailing whitespace, either), None otherwise (the parser's own default applies)."""
    tail = prompt[-_TAIL:].rstrip()
    if any(tail.endswith(marker) for marker in ends):
        return PromptReasoning.CLOSED
    if any(tail.endswith(marker) for marker in starts):
        return PromptReasoning.OPEN
    return None
