"""``deepseek_v31``: DeepSeek V3.1's calls (V3.1 and V3.1-Terminus).

::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>
    <｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>

(shown on two lines; the model writes one). The bars are fullwidth (U+FF5C) and the
spaces are U+2581, as DeepSeek's tokenizer spells its special tokens; without
``skip_special_tokens=False`` they are decoded away and no call can be found. The head is the
function's name alone (V3 and R1 wrote ``function<｜tool▁sep｜>name`` and a fenced JSON block:
another format, ``deepseek_v3.py``). The section's rules are ``sections.SectionParser``'s.
"""

from __future__ import annotations

from gateway.tools.parsers.sections import SectionParser

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
SEP = "<｜tool▁sep｜>"
CALL_END = "<｜tool▁call▁end｜>"


class DeepSeekV31Parser(SectionParser):
    MARKER = CALLS_BEGIN
    SECTION_END = CALLS_END
    CALL_BEGIN = CALL_BEGIN
    ARGS_BEGIN = SEP
    CALL_END = CALL_END
    __slots__ = ()

    def _name(self, head: str) -> str | None:
        return head
