"""``kimi_k2``: Kimi K2's calls (K2 Instruct, K2 Thinking, K2.5).

::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

(on one line, and whitespace between the tokens allowed).

The head is the call's id as Kimi's template writes it, ``functions.NAME:INDEX``; the name is
what lies between the last ``.`` and the ``:`` (``NAME:INDEX`` alone is accepted too, as vLLM
does), and a head without ``:INDEX`` is no call. The id itself is not kept: the gateway issues
its own. The markers are special tokens of Kimi's tokenizer, so they must be decoded
(``skip_special_tokens=False``). The section's rules are ``sections.SectionParser``'s.
"""

from __future__ import annotations

from gateway.tools.parsers.sections import SectionParser

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"


class KimiK2Parser(SectionParser):
    MARKER = SECTION_BEGIN
    SECTION_END = SECTION_END
    CALL_BEGIN = CALL_BEGIN
    ARGS_BEGIN = ARGUMENT_BEGIN
    CALL_END = CALL_END
    __slots__ = ()

    def _name(self, head: str) -> str | None:
        path, colon, index = head.rpartition(":")
        if not colon or not index.isascii() or not index.isdigit():
            return None
        return path.rpartition(".")[2]
