"""``openai``: gpt-oss's calls, as the harmony reasoning parser passes them on.

gpt-oss addresses a call to ``functions.NAME`` in a harmony message header; the ``openai``
reasoning parser (``gateway.reasoning.harmony``), which reads harmony's channels, turns each such
message into ``<|call|>functions.NAME<|message|>ARGS<|end|>`` in the content it passes on, and
this parser reads that block: a call when NAME is one of the request's tools and ARGS a JSON
object, else the block is content. So the ``openai`` tool-call parser needs the ``openai``
reasoning parser in front of it (the catalog pairs them).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.tools.calls import arguments_text
from gateway.tools.stream import MarkerParser
from gateway.tools.types import ParsedCall

CALL_OPEN = "<|call|>"
MESSAGE = "<|message|>"
END = "<|end|>"
"""The block a call is passed on as: ``<|call|>functions.NAME<|message|>ARGS<|end|>``."""
OPEN = CALL_OPEN + "functions."


class HarmonyParser(MarkerParser):
    MARKER = OPEN
    TRIGGER = "<"
    __slots__ = ()

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        buf = self._buf
        end = buf.find(END, self._open_end)
        if end == -1:
            return None
        name, found, arguments = buf[self._open_end : end].partition(MESSAGE)
        if not found or name not in self._tool_names:
            return end + len(END), None
        text = arguments_text(arguments.strip() or "{}")
        return end + len(END), None if text is None else (ParsedCall(name, text),)
