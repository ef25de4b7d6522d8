"""The two shapes every tool-call parser shares: a parsed call, and the parser protocol."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """A tool call taken out of a model's text, whole or (arguments that stream) in pieces.

    ``arguments`` is ``json.dumps(obj, ensure_ascii=False)`` of the arguments object, whatever
    the model wrote (pretty-printed JSON, a JSON string holding an object, Python literals): one
    spelling for every parser, so the streamed fragments and the assembled answer agree, and
    non-ASCII text stays readable instead of becoming ``\\u`` escapes.
    """

    name: str
    arguments: str
    opens: bool = True
    """The call's first piece: it names the function (a call that streams its arguments is said
    in pieces; one that is whole is one piece that opens and closes)."""
    closes: bool = True
    """The call's last piece. The ``arguments`` of a call's pieces, joined, are its arguments;
    ``name`` counts only on the piece that opens it."""


def whole_calls(pieces: Iterable[ParsedCall]) -> list[ParsedCall]:
    """Calls said in pieces, joined into whole ones (what a client assembles from the stream)."""
    calls: list[ParsedCall] = []
    for piece in pieces:
        if piece.opens:
            calls.append(ParsedCall(piece.name, piece.arguments))
        else:
            calls[-1] = ParsedCall(calls[-1].name, calls[-1].arguments + piece.arguments)
    return calls


class ToolCallParser(Protocol):
    """One per choice (one sequence); fed the choice's decoded text in arbitrary pieces.

    The split of the text into pieces never changes the result: the concatenated content and the
    list of calls are the same for any split, because a parser only decides about text it has
    seen whole (a partial marker or an open call block is held until it resolves).
    """

    def feed(self, text: str) -> tuple[str, list[ParsedCall]]:
        """(content text safe to show now, calls completed now)"""
        ...

    def finish(self) -> tuple[str, list[ParsedCall]]:
        """End of sequence: flush everything held. Incomplete or malformed markup comes back as
        content text."""
        ...

    @property
    def called(self) -> bool:
        """At least one call was returned (the finish reason becomes ``tool_calls``)."""
        ...
