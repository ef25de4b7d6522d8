"""Reasoning between an opening and a closing marker: ``<think>…</think>`` and its kin.

Two families, as the models write them:

- **implicit start** (``deepseek_r1``; ``qwen3`` for a request whose rendered prompt ends with
  ``<think>``, ``gateway.reasoning.prompt``): the chat template opens the reasoning in the prompt
  (DeepSeek-R1-0528, Qwen3's thinking-only releases, Qwen3.5, GLM-4.5+), so the output starts
  inside it. Everything before the closing marker is reasoning (an opening marker the model
  writes anyway is dropped); without a closing marker the whole output is reasoning, as vLLM
  answers.
- **explicit start** (``qwen3`` otherwise, ``mistral``, ``granite``): the output opens with the marker
  (after optional whitespace) when the model thinks; output that opens any other way has no
  reasoning and streams as content from its first character. Reasoning cut before its closing
  marker (``max_tokens``) stays reasoning: it was streamed as reasoning, and a stream cannot take
  it back, so the whole answer says the same.

Markers never reach the client. Text after the closing marker is the answer, as written.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.tools.scan import find_first, held_from_any, skip_space

_OPENING, _THINKING, _ANSWER = range(3)


class TagReasoningParser:
    """Reasoning from ``starts`` to ``ends`` (each a choice of spellings)."""

    __slots__ = ("_starts", "_ends", "_implicit", "_state", "_buf", "_trigger")

    def __init__(self, starts: Sequence[str], ends: Sequence[str], *, implicit: bool) -> None:
        self._starts = tuple(starts)
        self._ends = tuple(ends)
        self._implicit = implicit
        self._state = _OPENING
        self._buf = ""
        firsts = {marker[0] for marker in self._ends}
        self._trigger = firsts.pop() if len(firsts) == 1 else None
        """The closing markers' one first character: text without it is reasoning at once."""

    @property
    def thinking(self) -> bool:
        return self._state == _THINKING or (self._implicit and self._state == _OPENING)

    @property
    def answered(self) -> bool:
        return self._state == _ANSWER

    def feed(self, text: str) -> tuple[str, str]:
        state = self._state
        if state == _ANSWER:
            return "", text
        trigger = self._trigger
        if state == _THINKING and not self._buf and trigger is not None and trigger not in text:
            return text, ""  # the per-token case inside the reasoning
        self._buf += text
        return self._advance(False)

    def finish(self) -> tuple[str, str]:
        if self._state == _ANSWER:
            return "", ""
        result = self._advance(True)  # holds nothing back
        self._state = _ANSWER
        return result

    def _advance(self, final: bool) -> tuple[str, str]:
        if self._state == _OPENING:
            if not self._open(final):
                return "", ""
            if self._state == _ANSWER:
                content, self._buf = self._buf, ""
                return "", content
        buf = self._buf
        start, marker = find_first(buf, self._ends)
        if start != -1:
            self._buf, self._state = "", _ANSWER
            return buf[:start], buf[start + len(marker) :]
        cut = len(buf) if final else held_from_any(buf, self._ends)
        self._buf = buf[cut:]
        return buf[:cut], ""

    def _open(self, final: bool) -> bool:
        """Decide how the output opens; False while it cannot be told yet."""
        buf = self._buf
        lead = skip_space(buf, 0)
        rest = buf[lead:]
        for marker in self._starts:
            if rest.startswith(marker):
                self._buf, self._state = rest[len(marker) :], _THINKING
                return True
        if not final and (not rest or any(marker.startswith(rest) for marker in self._starts)):
            return False  # only whitespace, or a part of an opening marker, so far
        self._state = _THINKING if self._implicit else _ANSWER
        return True
