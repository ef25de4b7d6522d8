"""Incremental scanning helpers shared by the tool-call and reasoning parsers: markers (a text
ending in part of one, the first of several) and bracket spans.

They work on a buffer that only grows at its end while a block is open: a held marker is looked
for only in the last few characters, and a span keeps its position between calls, so feeding a
long call one character at a time stays linear: nothing is scanned twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence


def held_from(text: str, marker: str) -> int:
    """Where a proper prefix of ``marker`` ends ``text`` (to be held back), else ``len(text)``.

    Only the last ``len(marker) - 1`` characters can hold such a prefix, so the check is
    bounded by the marker's length, not the text's.
    """
    size = len(text)
    first = marker[0]
    start = text.find(first, max(0, size - len(marker) + 1))
    while start != -1:
        if marker.startswith(text[start:]):
            return start
        start = text.find(first, start + 1)
    return size


def held_from_any(text: str, markers: Iterable[str]) -> int:
    """Where the longest proper prefix of any of ``markers`` ends ``text`` (to be held back), else
    ``len(text)``."""
    return min(held_from(text, marker) for marker in markers)


def partial_marker(text: str, pos: int, markers: Sequence[str]) -> bool:
    """``text[pos:]`` is a proper beginning of one of ``markers`` (the empty text is one): the
    text may still turn into that marker."""
    rest = text[pos:]
    return any(len(rest) < len(marker) and marker.startswith(rest) for marker in markers)


def find_first(text: str, markers: Iterable[str]) -> tuple[int, str]:
    """The first of ``markers`` in ``text``: (where it begins, which), or (-1, "")."""
    best, which = -1, ""
    for marker in markers:
        at = text.find(marker)
        if at != -1 and (best == -1 or at < best):
            best, which = at, marker
    return best, which


def skip_space(text: str, start: int) -> int:
    """The index of the first non-whitespace character at or after ``start`` (or ``len``)."""
    size = len(text)
    while start < size and text[start].isspace():
        start += 1
    return start


def could_open_object(text: str, start: int, *, allow_empty: bool) -> bool | None:
    """Whether ``text[start:]`` can begin a JSON object with keys: ``{`` then ``"``.

    True once ``{"`` (or ``{}`` when ``allow_empty``) is seen, False as soon as anything else
    is, None while only whitespace and ``{`` have arrived. The answer for a prefix never changes
    as text is added, so it cannot depend on how the text was split.
    """
    pos = start
    if pos == len(text):
        return None
    if text[pos] != "{":
        return False
    pos = skip_space(text, pos + 1)
    if pos == len(text):
        return None
    return text[pos] == '"' or (allow_empty and text[pos] == "}")


_JSON_OUTSIDE = re.compile(r'[{}\[\]"]')
_JSON_INSIDE = re.compile(r'["\\]')


class JsonSpan:
    """Finds where the JSON object or array opened at ``start`` closes, as text arrives.

    Brackets are counted outside strings only, and a backslash skips the next character inside
    one, so braces in argument values never end a call early. Mismatched brackets are not
    judged here: the span ends when the depth returns to zero and ``json.loads`` decides.
    """

    __slots__ = ("_depth", "_in_string", "_pos")

    def __init__(self, start: int) -> None:
        self._pos = start
        self._depth = 0
        self._in_string = False

    def end(self, text: str) -> int | None:
        """Index just past the closing bracket, or None while the span is still open."""
        pos, size = self._pos, len(text)
        while pos < size:
            if self._in_string:
                match = _JSON_INSIDE.search(text, pos)
                if match is None:
                    pos = size
                    break
                index = match.start()
                if text[index] == "\\":
                    pos = index + 2  # may pass the end: the escaped character arrives next
                    continue
                self._in_string = False
                pos = index + 1
                continue
            match = _JSON_OUTSIDE.search(text, pos)
            if match is None:
                pos = size
                break
            index = match.start()
            char = text[index]
            pos = index + 1
            if char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth <= 0:
                    self._pos = pos
                    return pos
        self._pos = pos
        return None


_PY_OUTSIDE = re.compile(r"""[\[\](){}'"]""")
_PY_INSIDE = {"'": re.compile(r"[\\']"), '"': re.compile(r'[\\"]')}


class PythonSpan:
    """Finds where the Python list opened at ``start`` closes, as text arrives.

    Python strings may be quoted with ``'`` or ``"``, single or triple; a quote near the end of
    the text waits for the next characters, since ``''`` (empty) and ``'''`` (triple) differ
    only there. Comments are not followed: a model's call list has none, and a wrong guess only
    makes ``ast`` refuse the text, which then comes back as content.
    """

    __slots__ = ("_depth", "_pos", "_quote")

    def __init__(self, start: int) -> None:
        self._pos = start
        self._depth = 0
        self._quote = ""

    def end(self, text: str) -> int | None:
        """Index just past the closing bracket, or None while the span is still open."""
        pos, size = self._pos, len(text)
        while pos < size:
            quote = self._quote
            if quote:
                match = _PY_INSIDE[quote[0]].search(text, pos)
                if match is None:
                    pos = size
                    break
                index = match.start()
                if text[index] == "\\":
                    pos = index + 2
                    continue
                if len(quote) == 1:
                    self._quote = ""
                    pos = index + 1
                    continue
                if index + 3 > size:
                    pos = index  # maybe the closing triple quote: wait for it whole
                    break
                if text.startswith(quote, index):
                    self._quote = ""
                    pos = index + 3
                else:
                    pos = index + 1
                continue
            match = _PY_OUTSIDE.search(text, pos)
            if match is None:
                pos = size
                break
            index = match.start()
            char = text[index]
            if char in "'\"":
                if index + 1 >= size:
                    pos = index
                    break
                if text[index + 1] != char:
                    self._quote = char
                    pos = index + 1
                    continue
                if index + 2 >= size:
                    pos = index
                    break
                if text[index + 2] == char:
                    self._quote = char * 3
                    pos = index + 3
                else:
                    pos = index + 2  # an empty string
                continue
            pos = index + 1
            if char in "[({":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth <= 0:
                    self._pos = pos
                    return pos
        self._pos = pos
        return None
