"""``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The format of Hermes 2 Pro / Hermes 3, Qwen 2.5 and Qwen 3 (their templates ask for exactly this)
and of many fine-tunes built on them. Several blocks are parallel calls; text before, between
and after blocks is content.

Arguments stream: once a block has said ``{"name": "<one of the tools>", "arguments": {`` (the
order every template asks for), the call opens and its arguments follow as they settle
(``ArgumentStream``); from then on the block is a call whatever follows, and arguments that turn
out malformed, or are cut off, end the call where they stopped making sense. A block written in
another order (``arguments`` first, arguments as a JSON string) is parsed whole at its closing
tag, and is content when it is not a valid call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gateway.tools.argstream import ArgumentStream
from gateway.tools.calls import call_from_object, load_json
from gateway.tools.stream import MarkerParser
from gateway.tools.types import ParsedCall

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_HEADER = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)')
"""A block's opening up to its arguments object, when it names the function first."""


class HermesParser(MarkerParser):
    MARKER = OPEN
    TRIGGER = "<"
    __slots__ = ("_search_from", "_arguments")

    def __init__(self, tool_names: frozenset[str]) -> None:
        super().__init__(tool_names)
        self._search_from = 0
        self._arguments: ArgumentStream | None = None

    def _begin(self) -> None:
        self._search_from = self._open_end
        self._arguments = None

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        buf = self._buf
        arguments = self._arguments
        if arguments is None:
            header = _HEADER.match(buf, self._open_end)
            if header is not None and header.group(1) in self._tool_names:
                arguments = self._arguments = ArgumentStream(header.end())
                self._parts.append(ParsedCall(header.group(1), "", closes=False))
        if arguments is not None:
            return self._stream(arguments, final)
        end = buf.find(CLOSE, self._search_from)
        if end == -1:
            self._search_from = max(self._open_end, len(buf) - len(CLOSE) + 1)
            return None
        call = call_from_object(load_json(buf[self._open_end : end]), self._tool_names)
        return end + len(CLOSE), None if call is None else (call,)

    def _stream(self, arguments: ArgumentStream, final: bool) -> tuple[int, Sequence[ParsedCall]] | None:
        """The open call's next piece; its last one (and the block's end) at the closing tag."""
        buf = self._buf
        if not (arguments.done or arguments.failed):
            piece = arguments.advance(buf, final)
            if piece:
                self._parts.append(ParsedCall("", piece, opens=False, closes=False))
            if not (arguments.done or arguments.failed):
                if not final:
                    return None
        start = max(self._search_from, arguments.end if arguments.done else self._open_end)
        end = buf.find(CLOSE, start)
        if end == -1 and not final:
            self._search_from = max(start, len(buf) - len(CLOSE) + 1)
            return None
        self._parts.append(ParsedCall("", "", opens=False, closes=True))
        return (len(buf) if end == -1 else end + len(CLOSE)), []
