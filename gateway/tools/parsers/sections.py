"""Calls inside a section of special tokens, each a head, a separator and JSON arguments.

DeepSeek V3.1 and Kimi K2 write the same shape with their own tokens::

    SECTION_BEGIN CALL_BEGIN head ARGS_BEGIN {...} CALL_END CALL_BEGIN ... CALL_END SECTION_END

The section is one block: its calls are returned together when ``SECTION_END`` arrives, or at
the end of the output when every call in it is complete (a model stopped right after its last
call, as vLLM accepts it too). Anything else inside (a call whose arguments are not a JSON
object, a head that names no offered function, text between calls, no call at all) makes the
whole section content, exactly as written. Arguments that open with ``{`` end where their
braces balance, so ``CALL_END`` quoted inside a string value does not cut them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from gateway.tools.calls import arguments_text, load_json
from gateway.tools.scan import JsonSpan, skip_space
from gateway.tools.stream import MarkerParser
from gateway.tools.types import ParsedCall


class SectionParser(MarkerParser):
    SECTION_END: ClassVar[str]
    CALL_BEGIN: ClassVar[str]
    ARGS_BEGIN: ClassVar[str]
    CALL_END: ClassVar[str]
    TRIGGER = "<"
    __slots__ = ()

    def _name(self, head: str) -> str | None:
        """The function a call's head names, or None when the head is not one."""
        raise NotImplementedError

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
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
            head_at = pos + len(self.CALL_BEGIN)
            args_marker = body.find(self.ARGS_BEGIN, head_at)
            if args_marker == -1:
                return None
            name = self._name(body[head_at:args_marker].strip())
            args_at = skip_space(body, args_marker + len(self.ARGS_BEGIN))
            if body.startswith("{", args_at):
                args_end = JsonSpan(args_at).end(body)
                call_end = -1 if args_end is None else skip_space(body, args_end)
                if call_end != -1 and not body.startswith(self.CALL_END, call_end):
                    return None
            else:
                call_end = body.find(self.CALL_END, args_at)
                args_end = call_end
            if name is None or name not in self._tool_names or call_end == -1 or args_end is None:
                return None
            arguments = arguments_text(load_json(body[args_at:args_end]))
            if arguments is None:
                return None
            calls.append(ParsedCall(name, arguments))
            pos = skip_space(body, call_end + len(self.CALL_END))
        return calls or None
