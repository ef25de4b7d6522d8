"""``deepseek_v3``: DeepSeek V3's and R1's calls (V3, V3-0324, R1, R1-0528).

::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜>
    <｜tool▁call▁begin｜>function<｜tool▁sep｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>

The tokens are DeepSeek V3.1's (``deepseek_v31``), fullwidth bars (U+FF5C) and U+2581 spaces,
special tokens that ``skip_special_tokens=False`` keeps; the head differs: the type word
``function`` before ``<｜tool▁sep｜>``, then the function's name on its own line, then the
arguments in a ``json`` code fence. Whitespace between the parts, and between calls (the
template puts a newline before each call after the first), is layout.

Arguments stream: once a call's head says ``function``, names one of the tools, and its fence
opens on a ``{``, the call opens and its arguments follow as they settle (``ArgumentStream``);
the closing fence and ``<｜tool▁call▁end｜>`` close it, and the next call may open the same way.
From the first opening on the section is calls: arguments that turn malformed or are cut off end
their call with what was sent, and so does a call that cannot stream (an unknown name, another
type word, no fence, arguments that are no object), and the rest of the section, to
``<｜tool▁calls▁end｜>`` or the end of the output, is not read.

A section whose first call cannot stream is read whole: its calls are returned together at
``<｜tool▁calls▁end｜>``, or at the end of the output when every call in it is complete. Anything
out of place in it (a head without ``function``, a name that is no offered function, arguments
that are neither an object nor a JSON string holding one, text between calls, no call at all)
makes the whole section content, exactly as written.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.tools.calls import arguments_text, load_json
from gateway.tools.parsers.deepseek_v31 import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP
from gateway.tools.scan import JsonSpan, skip_space
from gateway.tools.stream import ArgumentsBlockParser
from gateway.tools.types import ParsedCall

TYPE = "function"
FENCE = "```"
FENCE_LANGUAGE = "json"
_NAME_ENDS = ("\n", "`")
"""What ends a call's name: the newline before its fence (or the fence itself, written on the
name's line)."""

_CALLS, _DROP, _WHOLE, _ENDED = range(4)
_WAIT = -1
"""A position not known yet: the text ends inside what is being read."""
_BAD = -2
"""Not the expected markup."""


def partial(text: str, pos: int, markers: tuple[str, ...]) -> bool:
    """``text[pos:]`` is a proper beginning of one of ``markers``."""
    rest = text[pos:]
    return any(len(rest) < len(marker) and marker.startswith(rest) for marker in markers)


def _expect(text: str, pos: int, marker: str) -> int:
    """The index past ``marker`` at ``pos``; ``_WAIT`` while the text ends in part of it."""
    if text.startswith(marker, pos):
        return pos + len(marker)
    return _WAIT if partial(text, pos, (marker,)) else _BAD


def _name_end(text: str, start: int) -> int:
    """Where the call's name that begins at ``start`` ends, or -1 while nothing ends it."""
    ends = [at for at in (text.find(end, start) for end in _NAME_ENDS) if at != -1]
    return min(ends) if ends else -1


def _fence_open(text: str, pos: int) -> int:
    """From the end of a call's name: past the opening fence (and its ``json``) and the layout
    after it, where the arguments begin; ``_WAIT`` or ``_BAD``."""
    pos = _expect(text, skip_space(text, pos), FENCE)
    if pos < 0:
        return pos
    if text.startswith(FENCE_LANGUAGE, pos):
        pos += len(FENCE_LANGUAGE)
    elif partial(text, pos, (FENCE_LANGUAGE,)) and pos < len(text):
        return _WAIT
    pos = skip_space(text, pos)
    return _WAIT if pos == len(text) else pos


def _fence_close(text: str, pos: int) -> int:
    """From the end of a call's arguments: past the closing fence and ``<｜tool▁call▁end｜>``."""
    pos = _expect(text, skip_space(text, pos), FENCE)
    if pos < 0:
        return pos
    return _expect(text, skip_space(text, pos), CALL_END)


class DeepSeekV3Parser(ArgumentsBlockParser):
    MARKER = CALLS_BEGIN
    CLOSE = CALLS_END
    TRIGGER = "<"
    __slots__ = ("_mode", "_next", "_opened")

    def __init__(self, tool_names: frozenset[str]) -> None:
        super().__init__(tool_names)
        self._mode = _CALLS
        self._next = 0
        """Where the next call (or the section's end) is looked for."""
        self._opened = False

    def _begin(self) -> None:
        super()._begin()
        self._mode, self._next, self._opened = _CALLS, self._open_end, False

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        if self._mode == _CALLS:
            self._streaming(final)
        if self._mode == _DROP:
            end = self._find_close(CALLS_END, self._next)
            if end == -1:
                return (len(self._buf), []) if final else None
            return end + len(CALLS_END), []
        if self._mode == _ENDED:
            return self._next, []
        if self._mode == _CALLS:
            return (len(self._buf), []) if final else None
        return self._whole(final)

    def _streaming(self, final: bool) -> None:
        """Stream the section's calls while they can; leaves ``_mode`` at ``_DROP`` (the rest is
        not read), ``_WHOLE`` (no call opened: read the section whole), ``_ENDED`` (at the
        section's end, the block ends at ``_next``) or ``_CALLS`` (wait for more)."""
        buf, size = self._buf, len(self._buf)
        while True:
            arguments = self._arguments
            if arguments is not None:
                if not self._settle(arguments, final):
                    return
                if arguments.done:
                    end = _fence_close(buf, arguments.end)
                    if end >= 0:
                        self._close_call()
                        self._next = end
                        continue
                    if end == _WAIT and not final:
                        return
                self._close_call()
                return self._leave(arguments.pos)
            pos = skip_space(buf, self._next)
            if pos == size:
                if final:
                    self._mode = _CALLS if self._opened else _WHOLE
                return
            if buf.startswith(CALLS_END, pos):
                if self._opened:
                    self._mode, self._next = _ENDED, pos + len(CALLS_END)
                    return
                return self._leave(pos)
            if not buf.startswith(CALL_BEGIN, pos):
                if not final and partial(buf, pos, (CALL_BEGIN, CALLS_END)):
                    return
                return self._leave(pos)
            opening = self._opening(buf, pos + len(CALL_BEGIN))
            if opening is None:
                if final:
                    self._leave(pos)
                return
            name, args_at = opening
            if args_at < 0 or buf[args_at] != "{" or name not in self._tool_names:
                return self._leave(pos)
            self._open_call(name, args_at)
            self._opened = True

    def _opening(self, buf: str, head_at: int) -> tuple[str, int] | None:
        """(the function a call names, where its arguments begin, or ``_BAD``) once its head is
        read; None while the text ends inside the head."""
        sep = buf.find(SEP, head_at)
        if sep == -1:
            return None
        if buf[head_at:sep].strip() != TYPE:
            return "", _BAD
        name_at = sep + len(SEP)
        name_end = _name_end(buf, name_at)
        if name_end == -1:
            return None
        args_at = _fence_open(buf, name_end)
        if args_at == _WAIT:
            return None
        return buf[name_at:name_end].strip(), args_at

    def _leave(self, pos: int) -> None:
        """Stop streaming at ``pos``: the rest is dropped once a call opened, else the section is
        read whole from its start."""
        self._mode = _DROP if self._opened else _WHOLE
        self._next = pos
        self._search_from = pos if self._opened else self._open_end

    def _whole(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        buf = self._buf
        end = self._find_close(CALLS_END)
        if end == -1:
            if final:
                calls = self._calls(buf[self._open_end :])
                return None if calls is None else (len(buf), calls)
            return None
        return end + len(CALLS_END), self._calls(buf[self._open_end : end])

    def _calls(self, body: str) -> list[ParsedCall] | None:
        """Every call in a section's text, or None unless the text is calls and nothing else."""
        calls: list[ParsedCall] = []
        pos = skip_space(body, 0)
        while pos < len(body):
            if not body.startswith(CALL_BEGIN, pos):
                return None
            opening = self._opening(body, pos + len(CALL_BEGIN))
            if opening is None or opening[1] < 0 or opening[0] not in self._tool_names:
                return None
            name, args_at = opening
            if body[args_at] == "{":
                args_end = JsonSpan(args_at).end(body)
                call_end = _BAD if args_end is None else _fence_close(body, args_end)
            else:  # a JSON string holding the object: up to the closing fence
                marker = body.find(CALL_END, args_at)
                fenced = body[args_at:marker].rstrip() if marker != -1 else ""
                args_end = args_at + len(fenced) - len(FENCE)
                call_end = marker + len(CALL_END) if fenced.endswith(FENCE) else _BAD
            if call_end < 0 or args_end is None:
                return None
            arguments = arguments_text(load_json(body[args_at:args_end]))
            if arguments is None:
                return None
            calls.append(ParsedCall(name, arguments))
            pos = skip_space(body, call_end)
        return calls or None
