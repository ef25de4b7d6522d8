"""``openai``: gpt-oss's calls, as the harmony reasoning parser passes them on.

gpt-oss addresses a call to ``functions.NAME`` in a harmony message header; the ``openai``
reasoning parser (``gateway.reasoning.harmony``), which reads harmony's channels, turns each such
message into ``<|call|>functions.NAME<|message|>ARGS<|end|>`` in the content it passes on, and
this parser reads that block: a call when NAME is one of the request's tools and ARGS a JSON
object, else the block is content. So the ``openai`` tool-call parser needs the ``openai``
reasoning parser in front of it (detection picks both from gpt-oss's template). Arguments stream
as hermes's do (``ArgumentsBlockParser``): the call opens once NAME is one of the tools and ARGS
begins with ``{``.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.tools.calls import arguments_text
from gateway.tools.scan import skip_space
from gateway.tools.stream import ArgumentsBlockParser
from gateway.tools.types import ParsedCall

CALL_OPEN = "<|call|>"
MESSAGE = "<|message|>"
END = "<|end|>"
"""The block a call is passed on as: ``<|call|>functions.NAME<|message|>ARGS<|end|>``."""
OPEN = CALL_OPEN + "functions."


class HarmonyParser(ArgumentsBlockParser):
    MARKER = OPEN
    CLOSE = END
    TRIGGER = "<"
    __slots__ = ()

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        buf = self._buf
        arguments = self._arguments
        if arguments is None:
            at = buf.find(MESSAGE, self._open_end)
            if at != -1:
                start = skip_space(buf, at + len(MESSAGE))
                name = buf[self._open_end : at]
                if start < len(buf) and buf[start] == "{" and name in self._tool_names:
                    arguments = self._open_call(name, start)
        if arguments is not None:
            return self._stream(arguments, final)
        end = buf.find(END, self._open_end)
        if end == -1:
            return None
        name, found, text = buf[self._open_end : end].partition(MESSAGE)
        if not found or name not in self._tool_names:
            return end + len(END), None
        dumped = arguments_text(text.strip() or "{}")
        return end + len(END), None if dumped is None else (ParsedCall(name, dumped),)
