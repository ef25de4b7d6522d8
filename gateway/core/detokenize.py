"""Token ids → text, incrementally, for backends that answer tokens (TensorRT-LLM's
``tensorrt_llm`` model). Pure.

Decoding each response's ids alone is what loses text in TensorRT-LLM's own postprocessing:
SentencePiece tokenizers drop a piece's leading space at the start of a decode, and a character
whose bytes span two responses decodes as U+FFFD in both. The usual cure (vLLM's and TGI's) is
used here: decode a short window of ids that ends at the new ones, from an offset that stays a
few ids behind, and emit only what the window adds to the text of its already-read part, and
only once it no longer ends in U+FFFD (the rest of the character may come next). The window
starts with the prompt's last ids, so the first generated piece is decoded as it follows the
prompt (its leading space kept). The text is then the whole sequence's, decoded at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PROMPT_CONTEXT = 6
"""Prompt ids the window starts with (vLLM starts 5 behind its read offset)."""


class IncrementalDetokenizer:
    """One sequence's ids → text deltas."""

    __slots__ = ("_tokenizer", "_skip", "_ids", "_prefix", "_read")

    def __init__(self, tokenizer: Any, prompt_ids: Sequence[int] = (), *, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._ids = list(prompt_ids[-PROMPT_CONTEXT:])
        self._prefix = 0
        """Where the decoded window starts."""
        self._read = len(self._ids)
        """The ids before this have had their text emitted."""

    def _decode(self, ids: Sequence[int]) -> str:
        text: str = self._tokenizer.decode(ids, skip_special_tokens=self._skip)
        return text

    def feed(self, ids: Sequence[int]) -> str:
        """The text the new ``ids`` complete (possibly empty: a character not yet whole)."""
        if not ids:
            return ""
        self._ids.extend(ids)
        return self._advance(final=False)

    def name_tokens(self, entries: list[dict[str, dict[str, Any]]]) -> list[dict[str, dict[str, Any]]]:
        """Logprob entries whose tokens have no text yet (a backend that answers ids) with each
        token's own text, as vLLM's ``decoded_token`` holds it."""
        for entry in entries:
            for token_id, record in entry.items():
                if record.get("decoded_token") is None:
                    record["decoded_token"] = self._tokenizer.decode([int(token_id)], skip_special_tokens=False)
        return entries

    def finish(self) -> str:
        """Whatever is left, an incomplete character included (as U+FFFD)."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        window = self._ids[self._prefix :]
        read_text = self._decode(self._ids[self._prefix : self._read])
        text = self._decode(window)
        if len(text) <= len(read_text) or (not final and text.endswith("\ufffd")):
            return ""
        delta = text[len(read_text) :]  # past the read part's length even where a merge changed it
        self._prefix = self._read
        self._read = len(self._ids)
        if self._prefix > 0:  # keep the list short: drop ids the window will not look at again
            del self._ids[: self._prefix]
            self._read -= self._prefix
            self._prefix = 0
        return delta
