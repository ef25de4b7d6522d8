"""``deepseek_v32``: DeepSeek V3.2's DSML calls (V3.2, V3.2-Speciale).

::

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    <｜DSML｜invoke name="...">...</｜DSML｜invoke>
    </｜DSML｜function_calls>

``｜DSML｜`` is written with fullwidth bars (U+FF5C), as DeepSeek's tokenizer spells it; the
markup is decoded only with ``skip_special_tokens=False``. Each invoke is one call; its
parameters are the arguments object's keys, in order. A ``string="true"`` value is the string
itself, as written (no quotes, no escapes); a ``string="false"`` value is JSON (a number, a
boolean, null, an array, an object), and one that is not valid JSON is taken as the string it
spells. Whitespace between tags is layout; a value's text is its own, all of it.

Arguments stream: once ``<｜DSML｜invoke name="NAME">`` names one of the tools, the call opens
with ``{``; each parameter's key follows once its tag is whole (the name and the kind of value
known), a string value's characters as they are read (JSON-escaped, holding back only what could
still be its closing tag or the block's), an object value as it settles (``ArgumentStream``),
any other JSON value once its tag closes; ``</｜DSML｜invoke>`` (or the block's end, where the
model left the invoke unclosed) sends ``}`` and closes the call, and the next invoke may open
the same way. From the first opening on the block is calls: anything out of place (text between
tags, a repeated parameter, a ``string`` other than ``true`` or ``false``, an object value that
turns malformed, an invoke naming no offered function), the block's end inside a value, or the
end of the output ends the open call with what was sent, and the rest of the block, to
``</｜DSML｜function_calls>``, is not read. A block whose first invoke does not open a call (no
invoke, an unknown function, anything else first) is content exactly as written, to its end.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from gateway.tools.argstream import ArgumentStream
from gateway.tools.calls import INVALID, load_json
from gateway.tools.scan import held_from_any, partial_marker, skip_space
from gateway.tools.stream import MarkerParser
from gateway.tools.types import ParsedCall

DSML = "｜DSML｜"
OPEN = f"<{DSML}function_calls>"
CLOSE = f"</{DSML}function_calls>"
INVOKE = f"<{DSML}invoke"
INVOKE_END = f"</{DSML}invoke>"
PARAMETER = f"<{DSML}parameter"
PARAMETER_END = f"</{DSML}parameter>"

_HEAD, _PARAMS, _STRING, _JSON, _CONTENT, _DROP, _ENDED = range(7)
_WAIT = "wait"
_BAD = "bad"
_VALUE_ENDS = (PARAMETER_END, CLOSE)
_LONGEST_END = max(len(end) for end in _VALUE_ENDS)


def _tag(text: str, pos: int, opener: str, names: tuple[str, ...]) -> tuple[list[str], int] | str:
    """A tag ``opener name1="..." name2="...">`` at ``pos``: (its attribute values, the index past
    it), ``_WAIT`` while the text ends inside it, or ``_BAD``. The answer for a text never changes
    as text is added, so it cannot depend on how the text was split."""
    size = len(text)
    if not text.startswith(opener, pos):
        return _WAIT if partial_marker(text, pos, (opener,)) else _BAD
    at = pos + len(opener)
    values: list[str] = []
    for name in names:
        spaced = skip_space(text, at)
        if spaced == size:
            return _WAIT
        if spaced == at:
            return _BAD  # attributes are set apart by whitespace
        lead = name + '="'
        if not text.startswith(lead, spaced):
            return _WAIT if partial_marker(text, spaced, (lead,)) else _BAD
        start = spaced + len(lead)
        quote = text.find('"', start)
        if quote == -1:
            return _WAIT
        values.append(text[start:quote])
        at = quote + 1
    at = skip_space(text, at)
    if at == size:
        return _WAIT
    return (values, at + 1) if text[at] == ">" else _BAD


def _escaped(text: str) -> str:
    """``text`` as it is inside a JSON string (``json.dumps``' spelling, piece by piece)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def json_value(text: str) -> str:
    """A ``string="false"`` value re-dumped: its JSON, else the text as a string (a value that
    is not JSON, or JSON Python cannot send: a lone surrogate)."""
    value = load_json(text)
    if value is not INVALID:
        dumped = json.dumps(value, ensure_ascii=False)
        try:
            dumped.encode("utf-8")
        except UnicodeEncodeError:
            pass
        else:
            return dumped
    return json.dumps(text, ensure_ascii=False)


class DeepSeekV32Parser(MarkerParser):
    MARKER = OPEN
    TRIGGER = "<"
    __slots__ = ("_arguments", "_keys", "_opened", "_pos", "_search", "_sent", "_stage", "_value_at")

    def __init__(self, tool_names: frozenset[str]) -> None:
        super().__init__(tool_names)
        self._stage = _HEAD
        self._pos = 0
        """Where the next tag is looked for (or, ``_DROP``/``_ENDED``, where the block's end is)."""
        self._opened = False
        self._keys: set[str] = set()
        """The open call's parameters so far."""
        self._value_at = 0
        """Where the open value's text begins."""
        self._sent = 0
        """How far the open string value was sent."""
        self._search = 0
        """Where the open value's end is looked for next."""
        self._arguments: ArgumentStream | None = None
        """The open object value, streaming."""

    def _begin(self) -> None:
        self._stage, self._pos, self._opened, self._arguments = _HEAD, self._open_end, False, None

    def _close(self, final: bool) -> tuple[int, Sequence[ParsedCall] | None] | None:
        if self._stage not in (_CONTENT, _DROP, _ENDED):
            self._run(final)
        if self._stage == _ENDED:
            return self._pos, []
        if self._stage == _DROP:
            end = self._find_close(CLOSE, self._pos)
            if end == -1:
                return (len(self._buf), []) if final else None
            return end + len(CLOSE), []
        if self._stage == _CONTENT:
            end = self._find_close(CLOSE)
            return None if end == -1 else (end + len(CLOSE), None)
        return (len(self._buf), []) if final else None

    # -- the state machine ----------------------------------------------------------------------

    def _run(self, final: bool) -> None:
        """Send what the block's text settles; stops when it must wait for more, or at a stage
        that ends the block (``_CONTENT``, ``_DROP``, ``_ENDED``)."""
        while True:
            stage = self._stage
            if stage == _HEAD:
                going = self._head(final)
            elif stage == _PARAMS:
                going = self._params(final)
            elif stage == _STRING:
                going = self._string(final)
            else:
                going = self._json(final)
            if not going:
                return

    def _head(self, final: bool) -> bool:
        """Between invokes: the next one opens its call, or the block ends."""
        buf = self._buf
        pos = skip_space(buf, self._pos)
        if buf.startswith(CLOSE, pos):
            if self._opened:
                self._stage, self._pos = _ENDED, pos + len(CLOSE)
            else:
                self._stage = _CONTENT
            return False
        tag = _tag(buf, pos, INVOKE, ("name",))
        if tag == _WAIT or (tag == _BAD and partial_marker(buf, pos, (CLOSE,))):
            if final:
                self._stop(pos)
            return False
        if isinstance(tag, str) or tag[0][0] not in self._tool_names:
            self._stop(pos)
            return False
        (name,), end = tag
        self._parts.append(ParsedCall(name, "", closes=False))
        self._send("{")
        self._opened, self._keys = True, set()
        self._stage, self._pos = _PARAMS, end
        return True

    def _params(self, final: bool) -> bool:
        """Inside an invoke: the next parameter's tag, or the invoke's end."""
        buf = self._buf
        pos = skip_space(buf, self._pos)
        if buf.startswith(INVOKE_END, pos):
            self._send("}")
            self._end_call()
            self._stage, self._pos = _HEAD, pos + len(INVOKE_END)
            return True
        if buf.startswith(CLOSE, pos):  # the block ends the invoke too
            self._send("}")
            self._end_call()
            self._stage, self._pos = _ENDED, pos + len(CLOSE)
            return False
        tag = _tag(buf, pos, PARAMETER, ("name", "string"))
        if tag == _WAIT or (tag == _BAD and partial_marker(buf, pos, (INVOKE_END, CLOSE))):
            if final:
                self._end_call()
                self._stop(pos)
            return False
        if isinstance(tag, str) or tag[0][1] not in ("true", "false") or tag[0][0] in self._keys:
            self._end_call()
            self._stop(pos)
            return False
        (key, string), end = tag
        self._send((", " if self._keys else "") + json.dumps(key, ensure_ascii=False) + ": ")
        self._keys.add(key)
        self._value_at = self._sent = self._search = end
        if string == "true":
            self._send('"')
            self._stage = _STRING
        else:
            self._stage = _JSON
        return True

    def _value_end(self) -> tuple[int, str]:
        """Where the open value ends (-1: not yet) and the tag that ends it: its own, or the
        block's. Resumes where the last search stopped."""
        buf = self._buf
        found = [(at, end) for end in _VALUE_ENDS if (at := buf.find(end, self._search)) != -1]
        if not found:
            self._search = max(self._value_at, len(buf) - _LONGEST_END + 1)
            return -1, ""
        return min(found)

    def _string(self, final: bool) -> bool:
        """A ``string="true"`` value: its text as it is read, to its closing tag."""
        buf = self._buf
        end, tag = self._value_end()
        if end == -1:
            limit = len(buf) if final else held_from_any(buf, _VALUE_ENDS)
            self._send_text(limit)
            if final:
                self._end_call()
                self._stage, self._pos = _DROP, len(buf)
            return False
        self._send_text(end)
        if tag == CLOSE:  # the block ends inside the value: the call ends with what was sent
            self._end_call()
            self._stage, self._pos = _ENDED, end + len(CLOSE)
            return False
        self._send('"')
        self._stage, self._pos = _PARAMS, end + len(PARAMETER_END)
        return True

    def _json(self, final: bool) -> bool:
        """A ``string="false"`` value: an object as it settles, any other value once closed."""
        buf = self._buf
        arguments = self._arguments
        if arguments is None:
            start = skip_space(buf, self._value_at)
            if start == len(buf):
                if final:
                    self._end_call()
                    self._stop(start)
                return False
            if buf[start] == "{":
                arguments = self._arguments = ArgumentStream(start)
        if arguments is not None:
            if not (arguments.done or arguments.failed):
                self._send(arguments.advance(buf, final))
            if arguments.failed or (final and not arguments.done):
                return self._abandon(arguments.pos)
            if not arguments.done:
                return False
            pos = skip_space(buf, arguments.end)
            if buf.startswith(PARAMETER_END, pos):
                self._arguments = None
                self._stage, self._pos = _PARAMS, pos + len(PARAMETER_END)
                return True
            if not final and partial_marker(buf, pos, (PARAMETER_END,)):
                return False
            return self._abandon(pos)
        end, tag = self._value_end()
        if end == -1:
            if final:
                self._end_call()
                self._stop(len(buf))
            return False
        if tag == CLOSE:
            self._end_call()
            self._stage, self._pos = _ENDED, end + len(CLOSE)
            return False
        self._send(json_value(buf[self._value_at : end]))
        self._stage, self._pos = _PARAMS, end + len(PARAMETER_END)
        return True

    # -- helpers --------------------------------------------------------------------------------

    def _abandon(self, pos: int) -> bool:
        """The open object value stopped making sense at ``pos``: the call ends there."""
        self._arguments = None
        self._end_call()
        self._stop(pos)
        return False

    def _stop(self, pos: int) -> None:
        """Something out of place at ``pos``: the rest of the block is not read once a call
        opened, else the block is content."""
        self._stage, self._pos = (_DROP, pos) if self._opened else (_CONTENT, pos)

    def _send(self, piece: str) -> None:
        if piece:
            self._parts.append(ParsedCall("", piece, opens=False, closes=False))

    def _send_text(self, limit: int) -> None:
        """Send the open string value's text up to ``limit``."""
        if limit > self._sent:
            self._send(_escaped(self._buf[self._sent : limit]))
            self._sent = limit

    def _end_call(self) -> None:
        self._parts.append(ParsedCall("", "", opens=False, closes=True))
