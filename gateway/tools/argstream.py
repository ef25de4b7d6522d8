"""A call's JSON arguments re-dumped as they arrive, so they can stream.

``ArgumentStream`` reads the raw text of one JSON object (the model's spelling: any whitespace,
escapes, ``1E2``) from a buffer that grows at its end, and returns, piece by piece, the same object
in the gateway's one spelling, ``json.dumps(value, ensure_ascii=False)`` (``ParsedCall``). The
concatenation of the pieces is exactly ``dump_arguments(load_json(text))`` when the text is a
valid object, and nothing is returned that a later character could change:

- a key is returned once it is complete, with its ``": "``;
- a string value's characters as they are decoded (an unfinished escape, or a high surrogate
  waiting for its low half, is held);
- a number once the character after it shows it ended (``1`` could become ``12`` or ``1.5``),
  re-spelled as Python dumps it (``1E2`` → ``100.0``, ``-0`` → ``0``);
- ``true``, ``false``, ``null`` once complete; brackets and commas when seen.

What ``load_json`` / ``dump_arguments`` refuse, this refuses (``failed``): invalid JSON, NaN and
infinities, numbers that do not fit a float, lone surrogates, raw control characters in strings,
and, because a dict keeps a repeated key's first place with its last value, a repeated key.
With ``verbatim_numbers`` (a forced call, whose output is the arguments: ``verbatim_object``), a
number that does not fit a float goes out as the model wrote it instead of failing.
"""

from __future__ import annotations

import json
import re

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_LITERALS = {"true": "true", "false": "false", "null": "null"}
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_PLAIN = re.compile(r'[^"\\\x00-\x1f]+')
"""A run of string characters that stand for themselves, in JSON text and in ``json.dumps``'s."""

# What a container expects next.
_KEY_OR_CLOSE, _KEY, _COLON, _VALUE, _COMMA_OR_CLOSE, _VALUE_OR_CLOSE = range(6)


class _Frame:
    __slots__ = ("array", "expect", "keys")

    def __init__(self, array: bool) -> None:
        self.array = array
        self.expect = _VALUE_OR_CLOSE if array else _KEY_OR_CLOSE
        self.keys: set[str] = set()


class ArgumentStream:
    """One JSON object, read from ``buf[start:]`` by ``advance`` as the buffer grows."""

    __slots__ = ("_pos", "_stack", "_string_open", "_token", "_key", "_high", "_verbatim", "done", "failed", "end")

    def __init__(self, start: int, *, verbatim_numbers: bool = False) -> None:
        self._pos = start
        self._verbatim = verbatim_numbers
        self._stack: list[_Frame] = []
        self._string_open = False
        self._token = -1
        """Where the number or literal being read began (-1: none)."""
        self._key: list[str] | None = None
        """The characters of the key being read (None: not in a key); a value string streams."""
        self._high = ""
        """A decoded high surrogate waiting for its low half."""
        self.done = False
        """The object closed; ``end`` is the index just past it."""
        self.failed = False
        self.end = -1

    @property
    def pos(self) -> int:
        """Where reading stopped: past the object when done, at the offending character when
        failed, else where the next character is read."""
        return self._pos

    def advance(self, buf: str, final: bool = False) -> str:
        """The re-dumped text that ``buf`` (the same buffer, grown) now settles. ``final``: the
        text ends here (a number at the very end is then complete)."""
        out: list[str] = []
        pos, size = self._pos, len(buf)
        while pos < size and not (self.done or self.failed):
            if self._string_open:
                pos = self._string(buf, pos, out)
                if self._string_open:
                    break  # the buffer ended inside the string (maybe inside an escape)
                continue
            if self._token != -1:
                pos = self._atom(buf, pos, out, final)
                if self._token != -1:
                    break  # the number or literal may go on
                continue
            char = buf[pos]
            if char in " \t\r\n":
                pos += 1
                continue
            pos = self._structure(buf, pos, char, out)
        if final and self._token != -1 and not self.failed:
            pos = self._atom(buf, pos, out, True)
        self._pos = pos
        return "".join(out)

    # -- structure ------------------------------------------------------------------------------

    def _structure(self, buf: str, pos: int, char: str, out: list[str]) -> int:
        stack = self._stack
        if not stack:
            if char != "{":
                return self._fail(pos)  # arguments are an object
            stack.append(_Frame(array=False))
            out.append("{")
            return pos + 1
        frame = stack[-1]
        expect = frame.expect
        if expect == _COLON:
            if char != ":":
                return self._fail(pos)
            frame.expect = _VALUE
            out.append(": ")
            return pos + 1
        if expect == _COMMA_OR_CLOSE:
            if char == ",":
                frame.expect = _VALUE if frame.array else _KEY
                out.append(", ")
                return pos + 1
            return self._close(pos, char, out)
        if expect in (_KEY_OR_CLOSE, _KEY):
            if char == '"':
                self._string_open, self._key = True, []
                return pos + 1
            if expect == _KEY_OR_CLOSE:
                return self._close(pos, char, out)
            return self._fail(pos)
        # a value (or, right after "[", the close)
        if expect == _VALUE_OR_CLOSE and char == "]":
            return self._close(pos, char, out)
        frame.expect = _COMMA_OR_CLOSE
        if char == "{" or char == "[":
            stack.append(_Frame(array=char == "["))
            out.append(char)
            return pos + 1
        if char == '"':
            self._string_open, self._key = True, None
            out.append('"')
            return pos + 1
        if char in _NUMBER_CHARS or char in "tfn":
            self._token = pos
            return pos
        return self._fail(pos)

    def _close(self, pos: int, char: str, out: list[str]) -> int:
        frame = self._stack[-1]
        if char != ("]" if frame.array else "}"):
            return self._fail(pos)
        self._stack.pop()
        out.append(char)
        if not self._stack:
            self.done, self.end = True, pos + 1
        return pos + 1

    def _fail(self, pos: int) -> int:
        self.failed = True
        return pos

    # -- strings --------------------------------------------------------------------------------

    def _string(self, buf: str, pos: int, out: list[str]) -> int:
        """Decode from ``pos`` until the string closes or the buffer ends (an escape cut at the
        end waits, unread)."""
        key = self._key
        size = len(buf)
        while pos < size:
            plain = _PLAIN.match(buf, pos)
            if plain is not None:
                if self._high:
                    return self._fail(pos)  # a lone high surrogate
                text = plain.group()  # nothing in it that json.dumps escapes (ensure_ascii off)
                if key is None:
                    out.append(text)
                else:
                    key.append(text)
                pos = plain.end()
                continue
            char = buf[pos]
            if char == '"':
                if self._high:
                    return self._fail(pos)
                self._string_open = False
                if key is None:
                    out.append('"')
                else:
                    self._end_key("".join(key), out)
                return pos + 1
            if char != "\\":
                return self._fail(pos)  # a raw control character
            if pos + 1 == size:
                return pos  # the escape's letter is not here yet
            letter = buf[pos + 1]
            if letter == "u":
                if pos + 6 > size:
                    return pos
                digits = buf[pos + 2 : pos + 6]
                if not all(c in "0123456789abcdefABCDEF" for c in digits):
                    return self._fail(pos)
                decoded = self._surrogate(int(digits, 16))
                if decoded is None:
                    return self._fail(pos)
                pos += 6
            elif letter in _ESCAPES:
                if self._high:
                    return self._fail(pos)
                decoded = _ESCAPES[letter]
                pos += 2
            else:
                return self._fail(pos)
            if decoded:
                if key is None:
                    out.append(json.dumps(decoded, ensure_ascii=False)[1:-1])
                else:
                    key.append(decoded)
        return pos

    def _surrogate(self, code: int) -> str | None:
        """The character a ``\\uXXXX`` escape completes ("" while a high surrogate waits), or
        None for a lone surrogate."""
        high = self._high
        if 0xD800 <= code <= 0xDBFF:
            if high:
                return None
            self._high = chr(code)
            return ""
        if 0xDC00 <= code <= 0xDFFF:
            if not high:
                return None
            self._high = ""
            return chr(0x10000 + ((ord(high) - 0xD800) << 10) + (code - 0xDC00))
        if high:
            return None
        return chr(code)

    def _end_key(self, key: str, out: list[str]) -> None:
        frame = self._stack[-1]
        if key in frame.keys:
            self.failed = True  # a dict would keep the first place with the last value
            return
        frame.keys.add(key)
        frame.expect = _COLON
        out.append(json.dumps(key, ensure_ascii=False))

    # -- numbers and literals -------------------------------------------------------------------

    def _atom(self, buf: str, pos: int, out: list[str], final: bool) -> int:
        start, size = self._token, len(buf)
        number = buf[start] in _NUMBER_CHARS
        while pos < size and (buf[pos] in _NUMBER_CHARS if number else buf[pos].isalpha()):
            pos += 1
        if pos == size and not final:
            return pos  # it may go on
        self._token = -1
        text = buf[start:pos]
        if not number:
            literal = _LITERALS.get(text)
            if literal is None:
                return self._fail(start)
            out.append(literal)
            return pos
        match = _NUMBER.fullmatch(text)
        if match is None:
            return self._fail(start)
        try:
            if match.group(1) is None and match.group(2) is None:
                out.append(str(int(text)))
            else:
                value = float(text)
                if value in (float("inf"), float("-inf")):
                    return self._too_big(text, start, out)
                out.append(repr(value))
        except ValueError:  # an integer too long to convert
            return self._too_big(text, start, out)
        return pos

    def _too_big(self, text: str, start: int, out: list[str]) -> int:
        """A valid JSON number Python cannot hold: as written (``verbatim_numbers``), else a
        failure."""
        if not self._verbatim:
            return self._fail(start)
        out.append(text)
        return start + len(text)
