"""Calls inside a section of special tokens, each a head, a separator and JSON arguments.

DeepSeek V3.1 and Kimi K2 write the same shape with their own tokens::

    SECTION_BEGIN CALL_BEGIN head ARGS_BEGIN {...} CALL_END CALL_BEGIN ... CALL_END SECTION_END

Arguments stream: once a call's head names one of the tools and its arguments begin with ``{``,
the call opens and its arguments follow as they settle (``ArgumentsBlockParser``); ``CALL_END``
closes it, and the next call may open the same way. From the first opening on the section is
calls: arguments that turn malformed or are cut off end their call with what was sent, and so
does a call that cannot stream (an unknown name, arguments that are no object), and the rest of
the section, to ``SECTION_END`` or the end of the output, is not read.

A section whose first call cannot stream is one block read whole: its calls are returned
together when ``SECTION_END`` arrives, or at the end of the output when every call in it is
complete (a model stopped right after its last call, as vLLM accepts it too). Anything else
inside (a call whose arguments are not a JSON object, a head that names no offered function,
text between calls, no call at all) makes the whole section content, exactly as written.
Arguments that open with ``{`` end where their braces balance, so ``CALL_END`` quoted inside a
string value does not cut them.

A format whose heads or call ends are spelled otherwise (DeepSeek V3's type word and code fence)
says so in ``_opening``, ``_call_end`` and ``_string_arguments``; the section's rules stay these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from gateway.tools.calls import arguments_text, load_json
from gateway.tools.scan import JsonSpan, partial_marker, skip_space
from gateway.tools.stream import ArgumentsBlockParser
from gateway.tools.types import ParsedCall

_CALLS, _DROP, _WHOLE, _ENDED = range(4)
WAIT = -1
"""A position not known yet: the text ends inside what is being read."""
BAD = -2
"""Not the expected markup."""


class SectionParser(ArgumentsBlockParser):
    SECTION_END: ClassVar[str]
    CALL_BEGIN: ClassVar[str]
    ARGS_BEGIN: ClassVar[str]
    CALL_END: ClassVar[str]
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

    def _name(self, head: str) -> str | None:
        """The function a call's head names, or None when the head is not one."""
        raise NotImplementedError

    def _opening(self, text: str, head_at: int) -> tuple[str | None, int] | None:
        """(the function the call whose head begins at ``head_at`` names, or None; where its
        arguments begin, or ``BAD``) once the head is read; None while the text ends inside it."""
        marker = text.find(self.ARGS_BEGIN, head_at)
        args_at = -1 if marker == -1 else skip_space(text, marker + len(self.ARGS_BEGIN))
        if args_at == -1 or args_at == len(text):
            return None
        return self._name(text[head_at:marker].strip()), args_at

    def _call_end(self, text: str, pos: int) -> int:
        """From the end of a call's arguments: the index past its end (``CALL_END``), ``WAIT``
        while the text ends before that is known, else ``BAD``."""
        pos = skip_space(text, pos)
        if text.startswith(self.CALL_END, pos):
            return pos + len(self.CALL_END)
        return WAIT if partial_marker(text, pos, (self.CALL_END,)) else BAD

    def _string_arguments(self, body: str, args_at: int) -> tuple[int, int]:
        """Arguments read whole that do not open with ``{`` (a JSON string holding the object):
        (where they end, the index past the call's end, or ``BAD``)."""
        end = body.find(self.CALL_END, args_at)
        return end, BAD if end == -1 else end + len(self.CALL_END)

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        if self._mode == _CALLS:
            self._streaming(final)
        if self._mode == _DROP:
            end = self._find_close(self.SECTION_END, self._next)
            if end == -1:
                return (len(self._buf), []) if final else None
            return end + len(self.SECTION_END), []
        if self._mode == _ENDED:
            return self._next, []
        if self._mode == _CALLS:
            return (len(self._buf), []) if final else None
        return self._whole(final)

    def _streaming(self, final: bool) -> None:
        """Stream the section's calls while they can; leaves ``_mode`` at ``_DROP`` (the rest is
        not read), ``_WHOLE`` (no call opened: read the section whole), ``_ENDED`` (at
        ``SECTION_END``, the block ends at ``_next``) or ``_CALLS`` (wait for more)."""
        buf, size = self._buf, len(self._buf)
        while True:
            arguments = self._arguments
            if arguments is not None:
                if not self._settle(arguments, final):
                    return
                if arguments.done:
                    end = self._call_end(buf, arguments.end)
                    if end >= 0:
                        self._close_call()
                        self._next = end
                        continue
                    if end == WAIT and not final:
                        return
                self._close_call()
                return self._leave(arguments.pos)
            pos = skip_space(buf, self._next)
            if pos == size:
                if final:
                    self._mode = _CALLS if self._opened else _WHOLE
                return
            if buf.startswith(self.SECTION_END, pos):
                if self._opened:
                    self._mode, self._next = _ENDED, pos + len(self.SECTION_END)
                    return
                return self._leave(pos)
            if not buf.startswith(self.CALL_BEGIN, pos):
                if not final and partial_marker(buf, pos, (self.CALL_BEGIN, self.SECTION_END)):
                    return
                return self._leave(pos)
            opening = self._opening(buf, pos + len(self.CALL_BEGIN))
            if opening is None:
                if final:
                    self._leave(pos)
                return
            name, args_at = opening
            if args_at < 0 or buf[args_at] != "{" or name is None or name not in self._tool_names:
                return self._leave(pos)
            self._open_call(name, args_at)
            self._opened = True

    def _leave(self, pos: int) -> None:
        """Stop streaming at ``pos``: the rest is dropped once a call opened, else the section is
        read whole from its start."""
        self._mode = _DROP if self._opened else _WHOLE
        self._next = pos
        self._search_from = pos if self._opened else self._open_end

    def _whole(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        """The section read whole: its calls at ``SECTION_END`` (or at the end of the output,
        when every call is complete); None (content) unless it is calls and nothing else."""
        buf, marker = self._buf, self.SECTION_END
        end = self._find_close(marker)
        if end == -1:
            if final:
                calls = self._calls(buf[self._open_end :])
                return None if calls is None else (len(buf), calls)
            return None
        return end + len(marker), self._calls(buf[self._open_end : end])

    def _calls(self, body: str) -> list[ParsedCall] | None:
        """Every call in a section's text, or None unless the text is calls and nothing else."""
        calls: list[ParsedCall] = []
        pos = skip_space(body, 0)
        while pos < len(body):
            if not body.startswith(self.CALL_BEGIN, pos):
                return None
            opening = self._opening(body, pos + len(self.CALL_BEGIN))
            if opening is None:
                return None
            name, args_at = opening
            if args_at < 0 or name is None or name not in self._tool_names:
                return None
            if body[args_at] == "{":
                args_end = JsonSpan(args_at).end(body)
                call_end = BAD if args_end is None else self._call_end(body, args_end)
            else:
                args_end, call_end = self._string_arguments(body, args_at)
            if call_end < 0 or args_end is None:
                return None
            arguments = arguments_text(load_json(body[args_at:args_end]))
            if arguments is None:
                return None
            calls.append(ParsedCall(name, arguments))
            pos = skip_space(body, call_end)
        return calls or None
