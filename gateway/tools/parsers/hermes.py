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

from collections.abc import Sequence

from gateway.tools.calls import call_from_object, load_json
from gateway.tools.stream import HEADER, ArgumentsBlockParser
from gateway.tools.types import ParsedCall

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


class HermesParser(ArgumentsBlockParser):
    MARKER = OPEN
    CLOSE = CLOSE
    TRIGGER = "<"
    __slots__ = ()

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        buf = self._buf
        arguments = self._arguments
        if arguments is None:
            header = HEADER.match(buf, self._open_end)
            if header is not None and header.group(1) in self._tool_names:
                arguments = self._open_call(header.group(1), header.end())
        if arguments is not None:
            return self._stream(arguments, final)
        end = self._find_close(CLOSE)
        if end == -1:
            return None
        call = call_from_object(load_json(buf[self._open_end : end]), self._tool_names)
        return end + len(CLOSE), None if call is None else (call,)
