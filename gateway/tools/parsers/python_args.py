"""A Python call's keyword arguments re-dumped as a JSON object as they arrive (``pythonic``).

``PythonArguments`` reads ``city="Paris", days=3)`` (the text after a call's ``(``, in the
model's spelling: any quotes, escapes, prefixes, comments) from a buffer that grows at its end,
and returns, piece by piece, the JSON object ``parse_call_list`` makes of it when the list is
parsed whole (``dump_arguments`` of the literals ``ast`` reads), so the concatenation of the
pieces is exactly that call's ``arguments``. Nothing is returned that a later character could
change:

- ``"key": `` once the key's ``=`` is seen (``, `` before every key but the first);
- a string's characters as they are decoded, JSON-escaped; an unfinished escape, a quote that
  may be the start of a triple quote, a ``\\r`` that may start ``\\r\\n`` wait; the closing
  ``"`` waits for the next character that is neither space nor comment, since Python joins
  adjacent literals (``"a" "b"`` is ``"ab"``);
- a number once the character after it shows it ended, re-spelled as Python dumps it
  (``0x1F`` → ``31``, ``1e3`` → ``1000.0``, ``1_000`` → ``1000``); ``True``, ``False``,
  ``None`` as ``true``, ``false``, ``null``;
- brackets when seen (parentheses around a value are no value of their own, and go out as
  nothing); ``, `` inside lists and dicts only before the next item, since Python allows a
  trailing comma.

What ``parse_call_list`` refuses, this refuses (``failed``): positional and ``**`` arguments,
names, calls, operators (one sign on a number aside), f-strings, bytes, tuples, sets, dicts
with keys other than strings, complex numbers, floats that are not finite, integers too long
to print, lone surrogates, NUL characters, and the ones a stream cannot follow: a repeated
keyword (a syntax error for Python too), a repeated dict key (a dict keeps the first place
with the last value, which cannot be taken back) and a parenthesised dict key.
"""

from __future__ import annotations

import json
import keyword
import math
import re
import unicodedata

_BLANK = " \t\f\r\n"
_WORD = re.compile(r"\w+")
_NUMBER_TOKEN = re.compile(r"(?:[0-9A-Za-z_.]|(?<=[eE])[+-])+")
_DIGITS = r"[0-9](?:_?[0-9])*"
_INT = re.compile(r"0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+|[1-9](?:_?[0-9])*|0(?:_?0)*")
_FLOAT = re.compile(rf"(?:(?:{_DIGITS})?\.{_DIGITS}|{_DIGITS}\.)(?:[eE][+-]?{_DIGITS})?|{_DIGITS}[eE][+-]?{_DIGITS}")
_PLAIN = re.compile(r"[^\"'\\\x00-\x1f]+")
"""A run of string characters that stand for themselves, in Python source and in JSON."""
_ESCAPES = {
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_OCTAL = "01234567"
_HEX = frozenset("0123456789abcdefABCDEF")
_LITERALS = {"True": "true", "False": "false", "None": "null"}
_LONGEST_NAME = 100
"""Longer than any ``\\N{...}`` character name: a brace still open after it is no name."""

_CALL, _LIST, _DICT, _PAREN = range(4)
_CLOSERS = {_CALL: ")", _LIST: "]", _DICT: "}", _PAREN: ")"}
_JSON_CLOSERS = {_CALL: "}", _LIST: "]", _DICT: "}", _PAREN: ""}
# What a frame expects next.
_KEY_OR_CLOSE, _EQUALS, _VALUE, _VALUE_OR_CLOSE, _IN_VALUE, _COMMA_OR_CLOSE, _CLOSE = range(7)


def skip_blank(text: str, pos: int) -> int | None:
    """The index of the next character that is not whitespace, a comment or a line
    continuation (``len(text)`` when there is none), or None while the text ends inside a
    comment or right after a backslash (more may come)."""
    size = len(text)
    while pos < size:
        char = text[pos]
        if char in _BLANK:
            pos += 1
        elif char == "#":
            ends = [at for at in (text.find("\n", pos), text.find("\r", pos)) if at != -1]
            if not ends:
                return None
            pos = min(ends)
        elif char == "\\":
            if pos + 1 == size:
                return None
            if text[pos + 1] not in "\r\n":
                return pos
            pos += 2
        else:
            return pos
    return pos


def _quote_ready(text: str, pos: int, final: bool) -> bool:
    """Whether the quote at ``pos`` can be told single, empty (``""``) or triple: the next two
    characters are here, or the one after it differs, or the text ends."""
    if final or pos + 1 == len(text):
        return final
    return text[pos + 1] != text[pos] or pos + 2 < len(text)


class _Frame:
    __slots__ = ("count", "expect", "keys", "kind")

    def __init__(self, kind: int) -> None:
        self.kind = kind
        self.expect = _KEY_OR_CLOSE if kind in (_CALL, _DICT) else _VALUE_OR_CLOSE if kind == _LIST else _VALUE
        self.keys: set[str] = set()
        self.count = 0


class PythonArguments:
    """One call's keyword arguments, read from ``buf[start:]`` (just past its ``(``) by
    ``advance`` as the buffer grows; ``done`` at the call's ``)``."""

    __slots__ = (
        "_begun",
        "_joining",
        "_key",
        "_pos",
        "_quote",
        "_raw",
        "_sign",
        "_stack",
        "_token",
        "done",
        "end",
        "failed",
    )

    def __init__(self, start: int) -> None:
        self._pos = start
        self._stack = [_Frame(_CALL)]
        self._begun = False
        self._quote = ""
        """The open string's quote (``'``, ``"``, or tripled), "" outside strings."""
        self._raw = False
        self._key: list[str] | None = None
        """The decoded characters of the dict key being read (None: a value string streams)."""
        self._joining = False
        """A string just closed: a literal next continues it, anything else ends it."""
        self._token = -1
        """Where the number or word being read began (-1: none)."""
        self._sign = ""
        self.done = False
        self.failed = False
        self.end = -1

    @property
    def pos(self) -> int:
        """Where reading stopped: past the call when done, at the offending character when
        failed, else where the next character is read."""
        return self._pos

    def advance(self, buf: str, final: bool = False) -> str:
        """The JSON that ``buf`` (the same buffer, grown) now settles. ``final``: the text ends
        here (a number or word at the very end is then complete)."""
        out: list[str] = []
        if not self._begun:
            self._begun = True
            out.append("{")
        pos, size = self._pos, len(buf)
        while pos < size and not (self.done or self.failed):
            if self._token != -1:
                moved = self._atom(buf, pos, out, final)
                if self._token == -1 and not self._quote:
                    pos = moved  # the token ended (maybe right where it was read to)
                    continue
            elif self._quote:
                moved = self._string(buf, pos, out, final)
            elif buf[pos] in _BLANK or buf[pos] == "#" or buf[pos] == "\\":
                skipped = skip_blank(buf, pos)
                moved = size if skipped is None and final else pos if skipped is None else skipped
                if skipped is not None and skipped < size and buf[skipped] == "\\":
                    moved = self._fail(skipped)
            elif self._joining:
                moved = self._join(buf, pos, out, final)
            else:
                moved = self._structure(buf, pos, out, final)
            if moved == pos and not self.failed:
                break  # waiting for more text
            pos = moved
        if final and not (self.done or self.failed):
            pos = self._flush(buf, pos, out)
        self._pos = pos
        return "".join(out)

    def _flush(self, buf: str, pos: int, out: list[str]) -> int:
        """The end of the output: a number or word there is complete, and a string that just
        closed is not joined by another."""
        if self._token != -1 and not self._quote:
            pos = self._atom(buf, pos, out, True)
        if self._joining and not self.failed:
            self._joining = False
            if self._key is None:
                out.append('"')
                self._value_done()
        return pos

    def _fail(self, pos: int) -> int:
        self.failed = True
        return pos

    # -- structure ------------------------------------------------------------------------------

    def _structure(self, buf: str, pos: int, out: list[str], final: bool) -> int:
        char = buf[pos]
        frame = self._stack[-1]
        expect = frame.expect
        if expect == _EQUALS:
            if char != "=":
                return self._fail(pos)
            if pos + 1 == len(buf):
                return pos if not final else self._fail(pos)
            if buf[pos + 1] == "=":
                return self._fail(pos)
            frame.expect = _VALUE
            return pos + 1
        if expect in (_COMMA_OR_CLOSE, _CLOSE):
            if char == "," and expect == _COMMA_OR_CLOSE:
                frame.expect = _VALUE_OR_CLOSE if frame.kind == _LIST else _KEY_OR_CLOSE
                return pos + 1
            return self._close(pos, char, out)
        if expect == _KEY_OR_CLOSE:
            if char == _CLOSERS[frame.kind]:
                return self._close(pos, char, out)
            if frame.kind == _CALL:
                if not (char.isalpha() or char == "_"):
                    return self._fail(pos)  # positional, *args, **kwargs
                self._token = pos
                return pos + 1
            if char in "'\"":
                if not _quote_ready(buf, pos, final):
                    return pos
                self._key = []
                return self._open_string(buf, pos, raw=False)
            if char.isalpha():
                self._key, self._token = [], pos  # a string prefix, or no key
                return pos + 1
            return self._fail(pos)
        if expect == _VALUE_OR_CLOSE and char == "]":
            return self._close(pos, char, out)
        return self._value(buf, pos, char, out, final)

    def _value(self, buf: str, pos: int, char: str, out: list[str], final: bool) -> int:
        """A value begins at ``pos`` (or, after a sign or inside parentheses, goes on)."""
        if char in "'\"" and not _quote_ready(buf, pos, final):
            return pos
        frame = self._stack[-1]
        if frame.expect != _IN_VALUE:
            if frame.kind == _LIST:
                if frame.count:
                    out.append(", ")
                frame.count += 1
            frame.expect = _IN_VALUE
        elif not self._sign:
            return self._fail(pos)
        if char.isdigit() or char == ".":
            self._token = pos
            return pos + 1
        if char == "(":
            self._stack.append(_Frame(_PAREN))
            return pos + 1
        if char in "+-":
            if self._sign:
                return self._fail(pos)  # --1 is an operation on an operation
            self._sign = char
            return pos + 1
        if self._sign:
            return self._fail(pos)  # a sign on anything but a number
        if char == "[" or char == "{":
            self._stack.append(_Frame(_LIST if char == "[" else _DICT))
            out.append(char)
            return pos + 1
        if char in "'\"":
            out.append('"')
            return self._open_string(buf, pos, raw=False)
        if char.isalpha() or char == "_":
            self._token = pos
            return pos + 1
        return self._fail(pos)

    def _close(self, pos: int, char: str, out: list[str]) -> int:
        frame = self._stack[-1]
        if char != _CLOSERS[frame.kind]:
            return self._fail(pos)
        self._stack.pop()
        out.append(_JSON_CLOSERS[frame.kind])
        if not self._stack:
            self.done, self.end = True, pos + 1
        else:
            self._value_done()
        return pos + 1

    def _value_done(self) -> None:
        frame = self._stack[-1]
        frame.expect = _CLOSE if frame.kind == _PAREN else _COMMA_OR_CLOSE

    def _key_done(self, key: str, out: list[str]) -> bool:
        """A key of the current frame is whole: its JSON goes out; False when repeated."""
        frame = self._stack[-1]
        if key in frame.keys:
            return False
        frame.keys.add(key)
        out.append((", " if frame.count else "") + json.dumps(key, ensure_ascii=False) + ": ")
        frame.count += 1
        frame.expect = _EQUALS if frame.kind == _CALL else _VALUE
        return True

    def _join(self, buf: str, pos: int, out: list[str], final: bool) -> int:
        """After a string: another literal continues it, anything else ends it."""
        char = buf[pos]
        if char in "'\"":
            if not _quote_ready(buf, pos, final):
                return pos
            self._joining = False
            return self._open_string(buf, pos, raw=False)
        if char.isalpha():
            self._token = pos  # only a string prefix may follow
            return pos + 1
        self._joining = False
        if self._key is not None:
            key, self._key = "".join(self._key), None
            if char != ":" or not self._key_done(key, out):
                return self._fail(pos)
            return pos + 1
        out.append('"')
        self._value_done()
        return self._structure(buf, pos, out, final)  # the character after the value

    # -- numbers and words ----------------------------------------------------------------------

    def _atom(self, buf: str, pos: int, out: list[str], final: bool) -> int:
        start = self._token
        word = not (buf[start].isdigit() or buf[start] == ".")
        match = (_WORD if word else _NUMBER_TOKEN).match(buf, start)
        end = match.end() if match is not None else start
        if end == len(buf) and not final:
            return end  # it may go on
        quoted = word and end < len(buf) and buf[end] in "'\""
        if quoted and not _quote_ready(buf, end, final):
            return end
        self._token = -1
        text = buf[start:end]
        if not word:
            return self._number(text, end, out)
        if quoted:
            return self._prefix(text, buf, end, out)
        if self._joining or self._key is not None:
            return self._fail(start)  # after a string, or as a key: only a string prefix
        frame = self._stack[-1]
        if frame.kind == _CALL and frame.expect == _KEY_OR_CLOSE:
            return self._keyword(text, start, end, out)
        literal = _LITERALS.get(text)
        if literal is None or self._sign:
            return self._fail(start)
        out.append(literal)
        self._value_done()
        return end

    def _prefix(self, text: str, buf: str, end: int, out: list[str]) -> int:
        """A word right before a quote: a string prefix, of which only ``r`` and ``u`` make a
        text string (``b`` bytes, ``f`` code)."""
        frame = self._stack[-1]
        lowered = text.lower()
        if lowered not in ("r", "u") or self._sign or (frame.kind == _CALL and frame.expect == _KEY_OR_CLOSE):
            return self._fail(end - len(text))
        if self._key is None and not self._joining:
            out.append('"')
        self._joining = False
        return self._open_string(buf, end, raw=lowered == "r")

    def _keyword(self, text: str, start: int, end: int, out: list[str]) -> int:
        name = text if text.isascii() else unicodedata.normalize("NFKC", text)
        if not name.isidentifier() or keyword.iskeyword(name) or not self._key_done(name, out):
            return self._fail(start)
        return end

    def _number(self, text: str, end: int, out: list[str]) -> int:
        value: int | float
        if _INT.fullmatch(text):
            value = int(text, 0)
        elif _FLOAT.fullmatch(text):
            value = float(text)
            if not math.isfinite(value):
                return self._fail(end)
        else:
            return self._fail(end)  # complex, or no number
        if self._sign == "-":
            value = -value
        self._sign = ""
        try:
            out.append(repr(value))
        except ValueError:  # an integer too long to print
            return self._fail(end)
        self._value_done()
        return end

    # -- strings --------------------------------------------------------------------------------

    def _open_string(self, buf: str, pos: int, *, raw: bool) -> int:
        """Open the string whose quote is at ``pos`` (``_quote_ready``): single, triple, or
        ``""`` (empty, and closed at once)."""
        char = buf[pos]
        self._raw = raw
        if buf.startswith(char * 3, pos):
            self._quote = char * 3
        elif buf.startswith(char * 2, pos):
            self._joining = True
            return pos + 2
        else:
            self._quote = char
        return pos + len(self._quote)

    def _string(self, buf: str, pos: int, out: list[str], final: bool) -> int:
        """Decode from ``pos`` until the string closes or the text ends (what could still be an
        escape, a closing triple quote or ``\\r\\n`` waits, unread)."""
        key, size, quote = self._key, len(buf), self._quote
        while pos < size:
            plain = _PLAIN.match(buf, pos)
            if plain is not None:
                (out if key is None else key).append(plain.group())
                pos = plain.end()
                continue
            char = buf[pos]
            if char == quote[0]:
                if len(quote) == 1 or buf.startswith(quote, pos):
                    self._quote, self._joining = "", True
                    return pos + len(quote)
                if size - pos < 3 and quote.startswith(buf[pos:]) and not final:
                    return pos
                decoded, moved = char, pos + 1
            elif char == "\\":
                decoded, moved = self._escape(buf, pos, final)
            elif char == "\r" or char == "\n":
                if len(quote) == 1:
                    return self._fail(pos)  # a newline ends no single-quoted string
                moved = self._newline(buf, pos, final)
                decoded = "\n"
            elif char == "\x00":
                return self._fail(pos)
            else:
                decoded, moved = char, pos + 1
            if self.failed or moved == pos:
                return pos
            if decoded:
                if key is None:
                    out.append(json.dumps(decoded, ensure_ascii=False)[1:-1])
                else:
                    key.append(decoded)
            pos = moved
        return pos

    def _newline(self, buf: str, pos: int, final: bool) -> int:
        """Past the newline at ``pos`` (``\\r\\n`` is one); ``pos`` while a ``\\r`` at the end
        may be followed by ``\\n``."""
        if buf[pos] == "\n":
            return pos + 1
        if pos + 1 == len(buf):
            return pos + 1 if final else pos
        return pos + 2 if buf[pos + 1] == "\n" else pos + 1

    def _escape(self, buf: str, pos: int, final: bool) -> tuple[str, int]:
        """(the text the backslash at ``pos`` stands for, the index after it); the index is
        ``pos`` while the escape is not whole (or ``failed``)."""
        size = len(buf)
        if pos + 1 == size:
            return "", pos
        letter = buf[pos + 1]
        if letter == "\r" or letter == "\n":
            after = self._newline(buf, pos + 1, final)
            if after == pos + 1:
                return "", pos
            return ("\\\n" if self._raw else ""), after  # a line continuation
        if letter == "\x00":
            self.failed = True
            return "", pos
        if self._raw:
            return "\\" + letter, pos + 2
        if letter in _ESCAPES:
            return _ESCAPES[letter], pos + 2
        if letter in _OCTAL:
            end = pos + 2
            while end < min(size, pos + 4) and buf[end] in _OCTAL:
                end += 1
            if end < pos + 4 and end == size and not final:
                return "", pos
            return chr(int(buf[pos + 1 : end], 8)), end
        if letter in _HEX_ESCAPES:
            return self._hex(buf, pos, _HEX_ESCAPES[letter], final)
        if letter == "N":
            return self._named(buf, pos, final)
        return "\\" + letter, pos + 2  # an unknown escape stays as written

    def _hex(self, buf: str, pos: int, digits: int, final: bool) -> tuple[str, int]:
        end = pos + 2 + digits
        text = buf[pos + 2 : end]
        if not all(c in _HEX for c in text):
            self.failed = True
            return "", pos
        if len(text) < digits:
            self.failed = final
            return "", pos
        code = int(text, 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            self.failed = True  # no character, or half of one: no UTF-8 form
            return "", pos
        return chr(code), end

    def _named(self, buf: str, pos: int, final: bool) -> tuple[str, int]:
        if pos + 2 == len(buf):
            self.failed = final
            return "", pos
        close = buf.find("}", pos + 3, pos + 3 + _LONGEST_NAME)
        if buf[pos + 2] != "{" or (close == -1 and (final or len(buf) >= pos + 3 + _LONGEST_NAME)):
            self.failed = True
            return "", pos
        if close == -1:
            return "", pos
        try:
            decoded = unicodedata.lookup(buf[pos + 3 : close])
        except KeyError:
            decoded = ""
        if len(decoded) != 1:  # unknown, or a named sequence (no escape in Python)
            self.failed = True
            return "", pos
        return decoded, close + 1
