"""Reasoning split out of each choice's text as it streams (``plan.reasoning`` says how).

Runs after stop strings are cut and before tool calls are read: tool-call markup inside the
reasoning is not a call, and calls that follow the reasoning are found in the answer.

Reasoning tokens are counted per backend response: a response's tokens are the reasoning's when
the choice was inside the reasoning when it began or by its end (the opening and closing
markers' tokens count as reasoning). The planner asks the backend for a response per token
whenever it splits reasoning, streamed to the client or not, which makes the count exact; a
response that carries both the end of the reasoning and the start of the answer counts as
reasoning.
"""

from __future__ import annotations

from gateway.core.generation_plan import ReasoningPlan
from gateway.reasoning.registry import make_reasoning_parser
from gateway.reasoning.types import ReasoningParser


class ReasoningReader:
    """One choice's reader: splits its text and counts its reasoning tokens."""

    __slots__ = ("_parser", "_include", "tokens")

    def __init__(self, plan: ReasoningPlan) -> None:
        self._parser: ReasoningParser = make_reasoning_parser(plan.parser, calls=plan.calls, opened=plan.opened)
        self._include = plan.include
        self.tokens = 0

    def read(self, text: str, ending: bool, tokens: int) -> tuple[str, str]:
        """(reasoning to show now, answer text); ``tokens``: what the response added."""
        parser = self._parser
        was_thinking = parser.thinking
        reasoning, content = parser.feed(text) if text else ("", "")
        if tokens and (was_thinking or parser.thinking or reasoning):
            self.tokens += tokens
        if ending:
            more, rest = parser.finish()
            reasoning += more
            content += rest
        return (reasoning if self._include else ""), content
