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
makes the whole section content, exactly as written. The section's rules are
``sections.SectionParser``'s; this format spells its heads and call ends.
"""

from __future__ import annotations

from gateway.tools.parsers.deepseek_v31 import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP
from gateway.tools.parsers.sections import BAD, WAIT, SectionParser
from gateway.tools.scan import partial_marker, skip_space

TYPE = "function"
FENCE = "```"
FENCE_LANGUAGE = "json"
_NAME_ENDS = ("\n", "`")
"""What ends a call's name: the newline before its fence (or the fence itself, written on the
name's line)."""


def _expect(text: str, pos: int, marker: str) -> int:
    """The index past ``marker`` at ``pos``; ``WAIT`` while the text ends in part of it."""
    if text.startswith(marker, pos):
        return pos + len(marker)
    return WAIT if partial_marker(text, pos, (marker,)) else BAD


def _name_end(text: str, start: int) -> int:
    """Where the call's name that begins at ``start`` ends, or -1 while nothing ends it."""
    ends = [at for at in (text.find(end, start) for end in _NAME_ENDS) if at != -1]
    return min(ends) if ends else -1


def _fence_open(text: str, pos: int) -> int:
    """From the end of a call's name: past the opening fence (and its ``json``) and the layout
    after it, where the arguments begin; ``WAIT`` or ``BAD``."""
    pos = _expect(text, skip_space(text, pos), FENCE)
    if pos < 0:
        return pos
    if text.startswith(FENCE_LANGUAGE, pos):
        pos += len(FENCE_LANGUAGE)
    elif partial_marker(text, pos, (FENCE_LANGUAGE,)) and pos < len(text):
        return WAIT
    pos = skip_space(text, pos)
    return WAIT if pos == len(text) else pos


class DeepSeekV3Parser(SectionParser):
    MARKER = CALLS_BEGIN
    SECTION_END = CALLS_END
    CALL_BEGIN = CALL_BEGIN
    ARGS_BEGIN = SEP
    CALL_END = CALL_END
    __slots__ = ()

    def _opening(self, text: str, head_at: int) -> tuple[str | None, int] | None:
        """``function<｜tool▁sep｜>NAME`` then the opening fence."""
        sep = text.find(SEP, head_at)
        if sep == -1:
            return None
        if text[head_at:sep].strip() != TYPE:
            return "", BAD
        name_at = sep + len(SEP)
        name_end = _name_end(text, name_at)
        if name_end == -1:
            return None
        args_at = _fence_open(text, name_end)
        if args_at == WAIT:
            return None
        return text[name_at:name_end].strip(), args_at

    def _call_end(self, text: str, pos: int) -> int:
        """Past the closing fence and ``<｜tool▁call▁end｜>``."""
        pos = _expect(text, skip_space(text, pos), FENCE)
        if pos < 0:
            return pos
        return _expect(text, skip_space(text, pos), CALL_END)

    def _string_arguments(self, body: str, args_at: int) -> tuple[int, int]:
        """A JSON string holding the object: up to the closing fence."""
        marker = body.find(CALL_END, args_at)
        fenced = body[args_at:marker].rstrip() if marker != -1 else ""
        args_end = args_at + len(fenced) - len(FENCE)
        return args_end, marker + len(CALL_END) if fenced.endswith(FENCE) else BAD
