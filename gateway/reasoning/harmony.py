"""``openai``: gpt-oss's harmony format, read as text decoded with its special tokens.

A harmony turn is a series of messages, each a header and a body::

    <|channel|>analysis<|message|>thinking…<|end|>
    <|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>
    <|start|>assistant<|channel|>final<|message|>the answer…<|return|>

(the prompt ends with ``<|start|>assistant``, so the first header starts at ``<|channel|>``; the
recipient may also sit before the channel: ``<|start|>assistant to=functions.x<|channel|>…``).
The ``analysis`` channel is reasoning; ``final``, and ``commentary`` addressed to nobody (the
preamble gpt-oss writes before a call), are content; a message addressed to ``functions.NAME`` is
a tool call, passed on in the content as ``<|call|>functions.NAME<|message|>ARGS<|end|>`` for the
``openai`` tool-call parser (``gateway.tools``), which holds it back and releases it as a call.
Every other special token stays out of what the client sees.

Output that does not open with a header is content, as written (a model that answers plainly).
The ``openai-harmony`` library parses token ids with the model's own encoding; the gateway gets
text from Triton, and a decoder of that text is this small state machine (docs/DEPENDENCIES.md).
"""

from __future__ import annotations

from gateway.tools.parsers.harmony import CALL_OPEN, END, MESSAGE
from gateway.tools.scan import find_first, held_from_any

_BODY_ENDS = ("<|end|>", "<|call|>", "<|return|>", "<|start|>")
_HEADER_OPENERS = ("<|start|>", "<|channel|>")
_HEADER, _BODY = range(2)
_REASONING, _CONTENT, _CALL, _HIDDEN = range(4)


def _kind(header: str) -> tuple[int, str]:
    """What a message is, from its header: (kind, recipient)."""
    recipient = ""
    for word in header.replace("<|channel|>", " <|channel|>").replace("<|constrain|>", " ").split():
        if word.startswith("to="):
            recipient = word[3:]
    channel = header.partition("<|channel|>")[2].split(" ", 1)[0].strip()
    if recipient.startswith("functions."):
        return _CALL, recipient[len("functions.") :]
    if recipient:  # a built-in tool (browser, python) the gateway does not run
        return _HIDDEN, recipient
    if channel == "analysis":
        return _REASONING, ""
    return _CONTENT, ""


class HarmonyReasoningParser:
    __slots__ = ("_buf", "_state", "_kind", "_started", "_answered", "_calls")

    def __init__(self, calls: bool = False) -> None:
        self._calls = calls
        """Pass calls on to the tool-call parser; without one (no tools, ``tool_choice: "none"``)
        a call is dropped like a built-in tool's, so its markup never reaches the client."""
        self._buf = ""
        self._state = _HEADER
        self._kind = _CONTENT
        self._started = False
        """The first header has been told apart from plain text."""
        self._answered = False

    @property
    def thinking(self) -> bool:
        return self._state == _BODY and self._kind == _REASONING

    @property
    def answered(self) -> bool:
        return self._answered

    def feed(self, text: str) -> tuple[str, str]:
        if self._state == _BODY and not self._buf and "<" not in text:
            return (text, "") if self._kind == _REASONING else self._body_text(text)
        self._buf += text
        return self._advance(False)

    def finish(self) -> tuple[str, str]:
        result = self._advance(True)
        self._buf = ""
        return result

    def _body_text(self, text: str) -> tuple[str, str]:
        kind = self._kind
        if kind == _REASONING:
            return text, ""
        if kind == _HIDDEN:
            return "", ""
        return "", text

    def _advance(self, final: bool) -> tuple[str, str]:
        reasoning: list[str] = []
        content: list[str] = []
        while True:
            buf = self._buf
            if self._state == _HEADER:
                if not self._started:
                    stripped = buf.lstrip()
                    if not any(
                        stripped.startswith(m) or (m.startswith(stripped) and not final) for m in _HEADER_OPENERS
                    ):
                        self._started, self._state, self._kind = True, _BODY, _CONTENT  # plain text
                        self._answered = True
                        continue
                    if not any(stripped.startswith(m) for m in _HEADER_OPENERS):
                        break  # whitespace or a part of a header's opening
                at = buf.find(MESSAGE)
                if at == -1:
                    if final:  # a header that never opened its message: nothing to show
                        self._buf = ""
                    break
                self._started = True
                self._kind, name = _kind(buf[:at])
                if self._kind == _CALL and not self._calls:
                    self._kind = _HIDDEN
                self._state, self._buf = _BODY, buf[at + len(MESSAGE) :]
                if self._kind == _CALL:
                    content.append(CALL_OPEN + "functions." + name + MESSAGE)
                if self._kind != _REASONING:
                    self._answered = True
                continue
            at, marker = find_first(buf, _BODY_ENDS)
            if at == -1:
                cut = len(buf) if final else held_from_any(buf, _BODY_ENDS)
                self._emit(buf[:cut], reasoning, content)
                self._buf = buf[cut:]
                if final and self._kind == _CALL:
                    content.append(END)  # the call's markup closes; its parser judges the arguments
                break
            self._emit(buf[:at], reasoning, content)
            if self._kind == _CALL:
                content.append(END)
            self._buf, self._state, self._kind = buf[at + len(marker) :], _HEADER, _CONTENT
        return "".join(reasoning), "".join(content)

    def _emit(self, text: str, reasoning: list[str], content: list[str]) -> None:
        if not text:
            return
        shown, said = self._body_text(text)
        if shown:
            reasoning.append(shown)
        if said:
            content.append(said)
