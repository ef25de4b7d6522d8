"""The streaming machinery the parsers share: one buffer, a fast path, two families of formats.

- ``MarkerParser``: calls are blocks opened by a marker anywhere in the text (hermes'
  ``<tool_call>``, Mistral's ``[TOOL_CALLS]``); text outside blocks is content.
- ``LeadingParser``: the call(s) must open the output (Llama 3 JSON, pythonic lists, the forced
  shapes); output that starts any other way is content, streamed from its first character.

Both hold text back only while it could still be markup, return a block's raw text as content
when it turns out malformed before a call opened, and drop the whitespace after a valid call
(and before the first one, which the parser holds while nothing else has been seen). Calls
whose arguments stream open through ``ArgumentsBlockParser`` (marker formats),
``LeadingParser._stream_start`` and ``LeadingParser._call_list`` (lists of calls: ``CallArray``
for JSON arrays of call objects, pythonic's ``PythonCallList``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar, Protocol

from gateway.tools.argstream import ArgumentStream
from gateway.tools.calls import call_from_object, load_json
from gateway.tools.scan import JsonSpan, held_from, partial_marker, skip_space
from gateway.tools.types import ParsedCall

HEADER = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)')
"""A call object's opening up to its arguments object, when it names the function first (the
order hermes', Mistral's and Llama's templates ask for): where its arguments can stream."""


class Span(Protocol):
    def end(self, text: str) -> int | None: ...


class CallList(Protocol):
    """A list of calls streamed as it arrives (``CallArray``, pythonic's ``PythonCallList``)."""

    whole: bool
    """No call came out and the list cannot stream: the caller reads it whole."""

    def advance(self, buf: str, final: bool, out: list[ParsedCall]) -> int | None:
        """Add the pieces ``buf`` now settles to ``out``; the index just past the list once it
        ended, None while it is open (never at the end of the output, unless ``whole``)."""
        ...


def skip_markup(text: str, pos: int, markers: Sequence[str], final: bool) -> int | None:
    """Skip whitespace and any of ``markers`` from ``pos``: the index of the next other character.

    None while the text ends in whitespace or in part of a marker (more may come); at the end of
    the sequence (``final``) a partial marker is just text, and ``len(text)`` means "nothing else".
    """
    size = len(text)
    while True:
        pos = skip_space(text, pos)
        if pos == size:
            return pos if final else None
        for marker in markers:
            if text.startswith(marker, pos):
                pos += len(marker)
                break
        else:
            if not final and partial_marker(text, pos, markers):
                return None
            return pos


class StreamParser:
    """Buffer, fast path and bookkeeping; subclasses decide in ``_advance``.

    ``_plain``: everything from here on is content (no call can start any more), so ``feed``
    returns its text untouched. ``_idle``: nothing is held, and text without ``TRIGGER`` (the
    first character of the format's marker) is content as it is. Both make the common per-token
    case one membership test and no copy.
    """

    TRIGGER: ClassVar[str] = "\0"
    __slots__ = ("_buf", "_called", "_idle", "_plain", "_tool_names")

    def __init__(self, tool_names: frozenset[str]) -> None:
        self._tool_names = tool_names
        self._buf = ""
        self._plain = False
        self._idle = False
        self._called = False

    def feed(self, text: str) -> tuple[str, list[ParsedCall]]:
        if self._plain or (self._idle and self.TRIGGER not in text):
            return text, []
        self._buf += text
        return self._advance(False)

    def finish(self) -> tuple[str, list[ParsedCall]]:
        if self._plain and not self._buf:
            return "", []
        result = self._advance(True)
        self._buf, self._plain = "", True  # anything fed after the end is content
        return result

    @property
    def called(self) -> bool:
        return self._called

    def _advance(self, final: bool) -> tuple[str, list[ParsedCall]]:
        raise NotImplementedError

    def _result(self, out: list[str], calls: list[ParsedCall]) -> tuple[str, list[ParsedCall]]:
        if calls:
            self._called = True
        return "".join(out), calls


class MarkerParser(StreamParser):
    """Calls are blocks opened by ``MARKER``; subclasses find where a block ends (``_close``)."""

    MARKER: ClassVar[str]
    __slots__ = ("_in_block", "_open_end", "_skip_space", "_started", "_parts", "_search_from")

    def __init__(self, tool_names: frozenset[str]) -> None:
        super().__init__(tool_names)
        self._parts: list[ParsedCall] = []
        """Pieces of a call whose arguments stream, said by ``_close`` while its block is open."""
        self._in_block = False
        self._open_end = 0  # index just past the marker of the open block (the block starts at 0)
        self._skip_space = False  # drop whitespace: a call just ended
        self._started = False  # seen something other than whitespace
        self._search_from = 0  # where ``_find_close`` looks next in the open block

    def _begin(self) -> None:
        """Reset the per-block state when a block opens (``_open_end`` is set)."""

    def _find_close(self, marker: str, start: int = 0) -> int:
        """Where ``marker`` (the block's closing one) begins in the open block, or -1.

        The search resumes where the last one left off (only a marker's length of text before
        the end is looked at again), so a long block fed a token at a time is scanned once.
        """
        buf = self._buf
        start = max(self._search_from, start)
        end = buf.find(marker, start)
        if end == -1:
            self._search_from = max(start, len(buf) - len(marker) + 1)
        return end

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        """(end of the block, its calls or None if malformed), or None while it is open.

        The block is ``_buf[:end]``; a malformed block may end early (where it stopped making
        sense) and the text after it is scanned again as text. A format whose arguments stream
        appends a call's pieces to ``_parts`` as they settle, and ends its block with ``[]``.
        """
        raise NotImplementedError

    def _advance(self, final: bool) -> tuple[str, list[ParsedCall]]:
        out: list[str] = []
        calls: list[ParsedCall] = []
        while True:
            if not self._in_block:
                if not self._scan_text(out, final):
                    break
                continue
            closed = self._close(final)
            if self._parts:
                calls.extend(self._parts)
                self._parts.clear()
            if closed is None:
                if final:  # unterminated: the whole block is content
                    out.append(self._buf)
                    self._buf, self._in_block = "", False
                break
            end, found = closed
            if found is None:
                out.append(self._buf[:end])
            else:
                calls.extend(found)
                self._skip_space = True
            self._buf, self._in_block = self._buf[end:], False
        self._idle = not self._buf and self._started and not self._skip_space and not self._in_block
        return self._result(out, calls)

    def _scan_text(self, out: list[str], final: bool) -> bool:
        """Emit text up to the next marker; True when a block opened."""
        buf, marker = self._buf, self.MARKER
        if self._skip_space:
            start = skip_space(buf, 0)
            if start == len(buf):
                self._buf = ""
                return False
            buf, self._skip_space = buf[start:], False
        if not self._started:
            lead = skip_space(buf, 0)
            if lead == len(buf):  # only whitespace so far: it is dropped if a call opens next
                if final:
                    out.append(buf)
                    buf = ""
                self._buf = buf
                return False
            if buf.startswith(marker, lead):
                self._started = True
                return self._open(buf, lead + len(marker))
            if not final and len(buf) - lead < len(marker) and marker.startswith(buf[lead:]):
                self._buf = buf
                return False
            self._started = True
        index = buf.find(marker)
        if index == -1:
            cut = len(buf) if final else held_from(buf, marker)
            if cut:
                out.append(buf[:cut])
            self._buf = buf[cut:]
            return False
        if index:
            out.append(buf[:index])
        return self._open(buf[index:], len(marker))

    def _open(self, buf: str, open_end: int) -> bool:
        self._buf, self._open_end, self._in_block = buf, open_end, True
        self._search_from = open_end
        self._begin()
        return True


class ArgumentsBlockParser(MarkerParser):
    """A marker format whose calls stream their arguments (every one but pythonic's).

    A subclass's ``_close`` calls ``_open_call`` once the block has named one of the tools and
    its JSON arguments object begins, then hands over to ``_stream``: the call opens at once,
    its arguments follow as they settle (``ArgumentStream``), and it closes at ``CLOSE``. From
    the opening on the block is a call whatever follows: arguments that turn malformed, or are
    cut off, end it where they stopped making sense, and the rest of the block is not read.
    """

    CLOSE: ClassVar[str]
    __slots__ = ("_arguments",)

    def __init__(self, tool_names: frozenset[str]) -> None:
        super().__init__(tool_names)
        self._arguments: ArgumentStream | None = None

    def _begin(self) -> None:
        self._arguments = None

    def _open_call(self, name: str, start: int) -> ArgumentStream:
        """Open the call to ``name``, whose arguments object starts at ``start``."""
        arguments = self._arguments = ArgumentStream(start)
        self._parts.append(ParsedCall(name, "", closes=False))
        return arguments

    def _settle(self, arguments: ArgumentStream, final: bool) -> bool:
        """Add the open call's next piece; True once its arguments ended (done, failed, or cut
        off by the end of the output), when the caller closes the call (``_close_call``)."""
        if not (arguments.done or arguments.failed):
            piece = arguments.advance(self._buf, final)
            if piece:
                self._parts.append(ParsedCall("", piece, opens=False, closes=False))
            if not (arguments.done or arguments.failed or final):
                return False
        return True

    def _close_call(self) -> None:
        self._parts.append(ParsedCall("", "", opens=False, closes=True))
        self._arguments = None

    def _stream(self, arguments: ArgumentStream, final: bool) -> tuple[int, Sequence[ParsedCall]] | None:
        """The open call's next piece; its last one (and the block's end) at ``CLOSE``."""
        if not self._settle(arguments, final):
            return None
        end = self._find_close(self.CLOSE, arguments.end if arguments.done else 0)
        if end == -1 and not final:
            return None
        self._close_call()
        return (len(self._buf) if end == -1 else end + len(self.CLOSE)), []


class LeadingParser(StreamParser):
    """The output opens with the call(s): optional ``PREFIXES`` and whitespace, then ``OPENER``.

    After a valid call, whitespace and ``SUFFIXES`` are dropped; ``SEPARATOR`` (Llama 3's ``;``)
    followed by another opener starts the next call; anything else is content to the end.

    A format whose arguments stream says, in ``_stream_start``, when a span opens a call (its
    name and where its JSON arguments object begins): the call opens at once, its arguments
    follow as they settle (``ArgumentStream``), and the span ends where its brackets balance.
    From the opening on the span is a call whatever follows: arguments that turn malformed, or
    are cut off, end it where they stopped making sense, and the rest of the span is not read.
    """

    OPENER: ClassVar[str]
    PREFIXES: ClassVar[tuple[str, ...]] = ()
    SUFFIXES: ClassVar[tuple[str, ...]] = ()
    SEPARATOR: ClassVar[str] = ""
    VERBATIM_NUMBERS: ClassVar[bool] = False
    """Streamed numbers that do not fit a float go out as written (``ArgumentStream``)."""
    CALL_ARRAY: ClassVar[bool] = False
    """The span is an array of call objects, streamed by ``CallArray`` (``_call_list``)."""
    _START, _SPAN, _AFTER, _NEXT = range(4)
    __slots__ = ("_arguments", "_array", "_mode", "_open_at", "_span")

    def __init__(self, tool_names: frozenset[str]) -> None:
        super().__init__(tool_names)
        self._mode = self._START
        self._span: Span | None = None
        self._open_at = 0
        self._arguments: ArgumentStream | None = None
        self._array: CallList | None = None

    def _call_list(self, start: int) -> CallList | None:
        """What streams the calls of a span that is a list of them, opened at ``start``; None
        when the span is one call (``_stream_start``)."""
        return CallArray(start, self._tool_names) if self.CALL_ARRAY else None

    def _stream_start(self, text: str, start: int) -> tuple[str, int] | None:
        """(the function, where its arguments object begins) once the span opened at ``start``
        opens a call whose arguments stream; None while it does not (the span is then read
        whole when it closes). The answer for a prefix must hold for every longer text."""
        return None

    def _make_span(self, start: int) -> Span:
        """Where the call list opened at ``start`` ends: JSON brackets unless the format says."""
        return JsonSpan(start)

    def _could_open(self, text: str, start: int) -> bool | None:
        """Whether the opener at ``start`` can still begin a call (None: not known yet).

        Lets a parser give text that merely starts with the opener back at once, instead of
        holding it to the end of a bracket that may never close.
        """
        return True

    def _parse(self, text: str) -> Sequence[ParsedCall] | None:
        """The calls in one complete span, or None if it is not a valid call list."""
        raise NotImplementedError

    def _advance(self, final: bool) -> tuple[str, list[ParsedCall]]:
        out: list[str] = []
        calls: list[ParsedCall] = []
        while not self._plain and self._step(out, calls, final):
            pass
        if final and self._buf:
            out.append(self._buf)
            self._buf = ""
        return self._result(out, calls)

    def _stream(self, arguments: ArgumentStream, calls: list[ParsedCall], final: bool) -> bool:
        """The open call's next piece; its last one where the span's brackets balance (or at
        the end of the output)."""
        buf = self._buf
        if not (arguments.done or arguments.failed):
            piece = arguments.advance(buf, final)
            if piece:
                calls.append(ParsedCall("", piece, opens=False, closes=False))
            if not (arguments.done or arguments.failed or final):
                return False
        assert self._span is not None
        end = self._span.end(buf)
        if end is None:
            if not final:
                return False
            end = len(buf)
        calls.append(ParsedCall("", "", opens=False, closes=True))
        self._arguments = None
        self._buf, self._mode = buf[end:], self._AFTER
        return True

    def _to_plain(self, out: list[str], start: int) -> bool:
        out.append(self._buf[start:])
        self._buf, self._plain = "", True
        return False

    def _step(self, out: list[str], calls: list[ParsedCall], final: bool) -> bool:
        """One move of the state machine; False when it must wait for more text (or is plain).

        The span's moves stay inline (a streaming call's every token passes here); the moves
        before and after a span, a few per call, are ``_start`` and ``_after``."""
        buf, mode = self._buf, self._mode
        if mode == self._SPAN:
            assert self._span is not None
            array = self._array
            if array is not None:
                array_end = array.advance(buf, final, calls)
                if array.whole:
                    self._array = None  # no call came out: read whole below
                elif array_end is None:
                    return False
                else:
                    self._array, self._buf, self._mode = None, buf[array_end:], self._AFTER
                    return True
            arguments = self._arguments
            if arguments is None:
                opening = self._stream_start(buf, self._open_at)
                if opening is not None:
                    name, start = opening
                    arguments = self._arguments = ArgumentStream(start, verbatim_numbers=self.VERBATIM_NUMBERS)
                    calls.append(ParsedCall(name, "", closes=False))
            if arguments is not None:
                return self._stream(arguments, calls, final)
            end = self._span.end(buf)
            if end is None:
                return False  # at the end of the sequence, _advance returns it all as content
            found = self._parse(buf[self._open_at : end])
            if found is None:
                out.append(buf[:end])
                self._buf = buf[end:]
                return self._to_plain(out, 0)
            calls.extend(found)
            self._buf, self._mode = buf[end:], self._AFTER
            return True
        if mode == self._AFTER:
            return self._after(out, final)
        return self._start(out, final)

    def _after(self, out: list[str], final: bool) -> bool:
        """After a call: whitespace and ``SUFFIXES`` dropped, then ``SEPARATOR`` (the next call)
        or content to the end."""
        buf = self._buf
        pos = skip_markup(buf, 0, self.SUFFIXES, final)
        if pos is None:
            return False
        if pos == len(buf):
            self._buf = ""
            return False
        if self.SEPARATOR and buf[pos] == self.SEPARATOR:
            self._buf, self._mode = buf[pos:], self._NEXT
            return True
        return self._to_plain(out, pos)

    def _start(self, out: list[str], final: bool) -> bool:
        """At the output's start (past ``PREFIXES``) or after ``SEPARATOR``: a span opens at
        ``OPENER``, else the text is content."""
        buf = self._buf
        if self._mode == self._NEXT:
            pos = skip_space(buf, len(self.SEPARATOR))
        else:
            found_pos = skip_markup(buf, 0, self.PREFIXES, final)
            if found_pos is None:
                return False
            pos = found_pos
        if pos == len(buf):
            return False
        if buf[pos] != self.OPENER:
            return self._to_plain(out, 0)
        could = self._could_open(buf, pos)
        if could is None:
            return False
        if not could:
            return self._to_plain(out, 0)
        self._span, self._open_at, self._mode = self._make_span(pos), pos, self._SPAN
        self._array = self._call_list(pos)
        return True


_ELEMENT, _ARGUMENTS, _SEPARATOR, _DROP = range(4)


class CallArray:
    """A JSON array of call objects (``[{"name": ..., "arguments": {...}}, ...]``), its calls
    streamed as they arrive (Mistral before v11, the forced ``required`` array).

    An element that names one of the tools first and opens its arguments object (``HEADER``)
    opens its call at once, and its arguments follow as they settle (``ArgumentStream``); an
    element written another way is read whole where its braces balance, and is a call when
    valid. While no call has come out, anything malformed makes ``whole`` true: the caller reads
    the array whole (and returns it as content). Once one has, the array is calls: malformed
    arguments end their call where they stopped making sense, and a malformed element, or
    anything but ``,`` or ``]`` after one, ends the calls there; the rest of the array, to where
    its brackets balance or the end of the output, is not read.
    """

    __slots__ = ("_arguments", "_element", "_element_at", "_next", "_span", "_stage", "_tool_names", "opened", "whole")

    def __init__(self, start: int, tool_names: frozenset[str]) -> None:
        self._span = JsonSpan(start)
        self._tool_names = tool_names
        self._next = start + 1
        self._stage = _ELEMENT
        self._element: JsonSpan | None = None
        self._element_at = 0
        self._arguments: ArgumentStream | None = None
        self.opened = False
        self.whole = False

    def advance(self, buf: str, final: bool, out: list[ParsedCall]) -> int | None:
        """Add the pieces ``buf`` now settles to ``out``; the index just past the array once it
        ended, None while it is open (never at the end of the output, unless ``whole``)."""
        size = len(buf)
        while not self.whole:
            stage = self._stage
            if stage == _DROP:
                end = self._span.end(buf)
                return end if end is not None else size if final else None
            if stage == _ARGUMENTS:
                if not self._settle(buf, final, out):
                    return None
                continue
            pos = skip_space(buf, self._next)
            if pos == size:
                if final:
                    self._give_up()
                    continue
                return None
            char = buf[pos]
            if stage == _SEPARATOR:
                if char == "]":
                    return pos + 1
                if char != ",":
                    self._give_up()
                    continue
                self._next, self._stage = pos + 1, _ELEMENT
                continue
            if self._element is None:
                if char != "{":
                    self._give_up()
                    continue
                self._element, self._element_at = JsonSpan(pos), pos
            header = HEADER.match(buf, self._element_at)
            if header is not None and header.group(1) in self._tool_names:
                self._arguments = ArgumentStream(header.end())
                out.append(ParsedCall(header.group(1), "", closes=False))
                self.opened, self._stage = True, _ARGUMENTS
                continue
            end = self._element.end(buf)
            if end is None:
                if final:
                    self._give_up()
                    continue
                return None
            call = call_from_object(load_json(buf[self._element_at : end]), self._tool_names)
            if call is None:
                self._give_up()
                continue
            out.append(call)
            self.opened = True
            self._element, self._next, self._stage = None, end, _SEPARATOR
        return None

    def _settle(self, buf: str, final: bool, out: list[ParsedCall]) -> bool:
        """The open call's next piece; True once it closed (at its element's end)."""
        arguments = self._arguments
        assert arguments is not None and self._element is not None
        if not (arguments.done or arguments.failed):
            piece = arguments.advance(buf, final)
            if piece:
                out.append(ParsedCall("", piece, opens=False, closes=False))
            if not (arguments.done or arguments.failed or final):
                return False
        end = self._element.end(buf) if arguments.done else None
        if end is None and arguments.done and not final:
            return False
        out.append(ParsedCall("", "", opens=False, closes=True))
        self._arguments = None
        if end is None:
            self._stage = _DROP
        else:
            self._element, self._next, self._stage = None, end, _SEPARATOR
        return True

    def _give_up(self) -> None:
        """Something out of place: the rest is dropped once a call came out, else the array is
        read whole."""
        if self.opened:
            self._stage = _DROP
        else:
            self.whole = True
