"""``mistral``: ``[TOOL_CALLS]`` then the calls, in either of Mistral's two spellings.

- Tokenizers before v11 (Mistral 7B v0.3, Mixtral 8x22B, Nemo): ``[TOOL_CALLS] [{"name": ...,
  "arguments": {...}}, ...]``, a JSON array, whose calls stream as ``CallArray`` reads them (an
  array whose first element is no valid call is content, whole). One object alone is accepted
  too, read whole when its braces balance.
- v11 and later (Mistral Small 3.x, Large 2411, Pixtral Large, Magistral, Devstral):
  ``[TOOL_CALLS]name[ARGS]{...}``, repeated for parallel calls; v13 adds ``[CALL_ID]id`` before
  ``[ARGS]`` (the id is ignored: the gateway issues its own). Arguments stream: once the name is
  one of the tools and ``{`` follows ``[ARGS]``, the call opens and its arguments follow as they
  settle (``ArgumentsBlockParser``); arguments that turn malformed or are cut off end the call
  with what was sent, and the text up to the next ``[TOOL_CALLS]`` is not read.

Text before the marker is content. ``[TOOL_CALLS]``, ``[ARGS]`` and ``[CALL_ID]`` are control
tokens, removed by ``skip_special_tokens=True``: this parser needs them kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gateway.tools.calls import calls_from_json_text, dump_arguments, load_json
from gateway.tools.scan import JsonSpan, partial_marker, skip_space
from gateway.tools.stream import ArgumentsBlockParser, CallArray
from gateway.tools.types import ParsedCall

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"

_NAME = re.compile(r"([A-Za-z0-9_.\-]*)\s*")
_ID = re.compile(r"[A-Za-z0-9_\-]*\s*")
_ENTRY, _JSON, _NAME_STAGE, _ID_STAGE, _ARGS_START, _ARGS, _STREAM, _ARRAY = range(8)
_ON = -1
"""A stage's move done: the next stage goes on reading."""


class MistralParser(ArgumentsBlockParser):
    MARKER = TOOL_CALLS
    CLOSE = TOOL_CALLS
    TRIGGER = "["
    __slots__ = ("_array", "_json_at", "_name", "_pos", "_span", "_stage")

    def __init__(self, tool_names: frozenset[str]) -> None:
        super().__init__(tool_names)
        self._stage = _ENTRY
        self._pos = 0
        self._span = JsonSpan(0)
        self._json_at = 0
        self._name = ""
        self._array: CallArray | None = None

    def _begin(self) -> None:
        super()._begin()
        self._stage, self._pos = _ENTRY, self._open_end

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        buf = self._buf
        while True:
            stage = self._stage
            if stage == _STREAM:  # a v11 call's arguments: every token of it comes here first
                return self._stream_v11(final)
            if stage == _ARRAY:
                assert self._array is not None
                end = self._array.advance(buf, final, self._parts)
                if not self._array.whole:
                    return None if end is None else (end, [])
                self._open_json(self._json_at, _JSON)
                continue
            if stage == _JSON or stage == _ARGS:
                end = self._span.end(buf)
                if end is None:
                    return None
                text = buf[self._json_at : end]
                if stage == _JSON:
                    return end, calls_from_json_text(text, self._tool_names)
                return end, self._args_call(text)
            if stage == _ENTRY:
                at = self._entry(buf)
            elif stage == _ARGS_START:
                at = self._args_start(buf)
            else:
                at = self._head(buf, stage)
            if at is None:
                return None
            if at != _ON:
                return at, None  # out of place: content up to ``at``

    def _entry(self, buf: str) -> int | None:
        """After ``[TOOL_CALLS]``: an array, one object, or a v11 name. ``_ON``, or None while
        only whitespace came."""
        pos = skip_space(buf, self._pos)
        if pos == len(buf):
            return None
        if buf[pos] == "[":
            self._array, self._json_at, self._stage = CallArray(pos, self._tool_names), pos, _ARRAY
        elif buf[pos] == "{":
            self._open_json(pos, _JSON)
        else:
            self._stage, self._pos = _NAME_STAGE, pos
        return _ON

    def _head(self, buf: str, stage: int) -> int | None:
        """A v11 name (``_NAME_STAGE``) or call id (``_ID_STAGE``), then ``[CALL_ID]`` (after the
        name) or ``[ARGS]``: ``_ON`` past them, None while the text may still be them, else
        where the head stops making sense."""
        match = (_NAME if stage == _NAME_STAGE else _ID).match(buf, self._pos)
        assert match is not None  # both patterns match the empty string
        pos = match.end()
        if pos == len(buf):
            return None
        if stage == _NAME_STAGE:
            self._name = match.group(1)
            if buf.startswith(CALL_ID, pos):
                self._stage, self._pos = _ID_STAGE, pos + len(CALL_ID)
                return _ON
            if partial_marker(buf, pos, (CALL_ID,)):
                return None
        if buf.startswith(ARGS, pos):
            self._stage, self._pos = _ARGS_START, pos + len(ARGS)
            return _ON
        return None if partial_marker(buf, pos, (ARGS,)) else pos

    def _args_start(self, buf: str) -> int | None:
        """After ``[ARGS]``: a ``{`` opens the call (streamed when the name is one of the tools,
        else read whole); ``_ON``, None while only whitespace came, else where it is not."""
        pos = skip_space(buf, self._pos)
        if pos == len(buf):
            return None
        if buf[pos] != "{":
            return pos
        if self._name in self._tool_names:
            self._open_call(self._name, pos)
            self._stage = _STREAM
        else:
            self._open_json(pos, _ARGS)
        return _ON

    def _stream_v11(self, final: bool) -> tuple[int, Sequence[ParsedCall]] | None:
        """The v11 call's arguments as they settle. The block ends with its object; arguments
        that turn malformed or are cut off end the call, and the text up to the next
        ``[TOOL_CALLS]`` (the next call) is not read."""
        arguments = self._arguments
        assert arguments is not None
        if not self._settle(arguments, final):
            return None
        if arguments.done:
            self._close_call()
            return arguments.end, []
        end = self._find_close(TOOL_CALLS, arguments.pos)
        if end == -1 and not final:
            return None
        self._close_call()
        return (len(self._buf) if end == -1 else end), []

    def _open_json(self, start: int, stage: int) -> None:
        self._span, self._json_at, self._stage = JsonSpan(start), start, stage

    def _args_call(self, text: str) -> Sequence[ParsedCall] | None:
        arguments = load_json(text)
        if self._name not in self._tool_names or not isinstance(arguments, dict):
            return None
        dumped = dump_arguments(arguments)
        return None if dumped is None else (ParsedCall(self._name, dumped),)
