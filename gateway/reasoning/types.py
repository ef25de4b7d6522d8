"""The shape every reasoning parser shares."""

from __future__ import annotations

from typing import Protocol


class ReasoningParser(Protocol):
    """One per choice; fed the choice's decoded text in arbitrary pieces.

    The split of the text never changes the result: the concatenated reasoning and content are
    the same for any split, because a parser holds back only text that could still be part of a
    marker, and decides about it once it has seen enough.
    """

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning, content) that is safe to show now."""
        ...

    def finish(self) -> tuple[str, str]:
        """End of sequence: everything held, as reasoning or content."""
        ...

    @property
    def thinking(self) -> bool:
        """The parser has entered the reasoning and not left it (the tokens now are reasoning's)."""
        ...

    @property
    def answered(self) -> bool:
        """The reasoning is over, or there was none: what follows is the answer."""
        ...
