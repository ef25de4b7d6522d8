"""Stop and bad words: text → the ``[batch, 2, L]`` id tensor, and back into token sequences.

The layout (contract §2.9): row 0 holds every word's ids concatenated (padded with 0), row 1 the
cumulative end offsets (padded with -1). Each word is tokenized on its own, without special
tokens, and a word that gives no ids is dropped. That is why a SentencePiece stop word often never
matches: ``"stop"`` alone encodes as ``▁stop`` (the Metaspace prepends ``▁``), which equals the
model's tokens only where the word follows a space. The stand-ins reproduce that, not fix it.

v0.5.0 took one comma-separated string per batch item instead (``parse_v05_words``). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

Encode = Callable[[str], list[int]]


def _text(item: object) -> str:
    return item.decode("utf-8") if isinstance(item, bytes) else str(item)


def encode_words(words: Sequence[object], encode: Encode) -> tuple[list[int], list[int]]:
    """One batch item's words → (ids, cumulative end offsets)."""
    ids: list[int] = []
    offsets: list[int] = []
    for word in words:
        tokens = encode(_text(word))
        if not tokens:
            continue
        ids.extend(tokens)
        offsets.append(len(ids))
    return ids, offsets


def to_words_tensor(batch: Sequence[Sequence[object]], encode: Encode) -> NDArray[Any]:
    """Every batch item's words → INT32 ``[batch, 2, L]`` (``[batch, 2, 0]`` when no word gives ids)."""
    encoded = [encode_words(words, encode) for words in batch]
    width = max((max(len(ids), len(offsets)) for ids, offsets in encoded), default=0)
    tensor = np.zeros((len(batch), 2, width), dtype=np.int32)
    for index, (ids, offsets) in enumerate(encoded):
        tensor[index, 0, : len(ids)] = ids
        tensor[index, 1, :] = -1
        tensor[index, 1, : len(offsets)] = offsets
    return tensor


def from_words_tensor(item: NDArray[Any] | None) -> tuple[tuple[int, ...], ...]:
    """One batch item's ``[2, L]`` tensor → its token sequences (what ``tensorrt_llm`` matches)."""
    if item is None or item.size == 0:
        return ()
    values = np.asarray(item).reshape(2, -1)
    ids, offsets = values[0].tolist(), values[1].tolist()
    sequences: list[tuple[int, ...]] = []
    start = 0
    for end in offsets:
        if end < 0:
            break
        if end > start:
            sequences.append(tuple(ids[start:end]))
        start = end
    return tuple(sequences)


def parse_v05_words(item: object) -> list[str]:
    """v0.5.0's one comma-separated string → its words (empty pieces dropped)."""
    return [word for word in _text(item).split(",") if word]


def ends_with_any(tokens: Sequence[int], sequences: Sequence[tuple[int, ...]]) -> bool:
    """Whether ``tokens`` end with one of ``sequences`` (a stop word just completed)."""
    return any(len(tokens) >= len(seq) and tuple(tokens[-len(seq) :]) == seq for seq in sequences)
