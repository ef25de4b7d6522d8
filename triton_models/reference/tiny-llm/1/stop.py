"""Stop strings over a growing byte string, with hold-back so streaming never leaks a stop string.

Why bytes and not str: tokens are byte-level BPE pieces and may end in the middle of a UTF-8
character; the model streams raw bytes, so stop strings are matched on their UTF-8 encoding. vLLM's
semantics otherwise: the output ends right before the earliest match (or right after it with
``include_stop_str_in_output``), and text generated after the match in the same token is dropped.

Streaming rule: bytes that could still become the start of a stop string are held back until the
next token proves otherwise (or the sequence ends and they are flushed), so a client never receives
bytes of a stop string that later matches.
"""

from __future__ import annotations

from collections.abc import Sequence


def longest_stop_prefix_suffix(text: bytes | bytearray, stop: bytes) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``stop``."""
    for length in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:length]):
            return length
    return 0


class StopTextBuffer:
    """The output bytes of one sequence: what was generated, what was sent, and whether a stop matched."""

    def __init__(self, stops: Sequence[str], include_stop_str_in_output: bool = False) -> None:
        self._stops = [stop.encode("utf-8") for stop in stops]
        self._include = include_stop_str_in_output
        self._text = bytearray()
        self._sent = 0
        self.matched: str | None = None
        """The stop string that ended the sequence, once one has."""

    @property
    def text(self) -> bytes:
        """All output bytes so far (already cut at a matched stop string)."""
        return bytes(self._text)

    def append(self, new: bytes, check_stops: bool = True) -> bool:
        """Add a token's bytes; return True when a stop string matched (the text is then final).

        ``check_stops`` is false while ``min_tokens`` is not reached: vLLM ignores stop strings then.
        """
        if self.matched is not None:
            raise RuntimeError("append after a stop string matched")
        previous = len(self._text)
        self._text += new
        if not check_stops or not new:
            return False
        best: tuple[int, int, int] | None = None  # (position, -length, index): earliest, then longest
        for index, stop in enumerate(self._stops):
            start = max(previous - len(stop) + 1, 0)
            position = self._text.find(stop, start)
            if position >= 0 and (best is None or (position, -len(stop)) < best[:2]):
                best = (position, -len(stop), index)
        if best is None:
            return False
        position, negative_length, index = best
        cut = position - negative_length if self._include else position
        del self._text[cut:]
        self.matched = self._stops[index].decode("utf-8")
        return True

    def _holdback(self) -> int:
        if self._include or self.matched is not None:
            # With the stop string kept in the output, anything before a match is output anyway.
            return 0
        return max((longest_stop_prefix_suffix(self._text, stop) for stop in self._stops), default=0)

    def take_delta(self, final: bool = False) -> bytes:
        """Bytes safe to send now (all remaining ones when ``final``); each byte is returned once."""
        end = len(self._text) if final else max(self._sent, len(self._text) - self._holdback())
        delta = bytes(self._text[self._sent : end])
        self._sent = end
        return delta
