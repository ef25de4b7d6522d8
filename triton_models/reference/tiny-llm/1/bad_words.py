"""``bad_words``: words the output must not contain, as vLLM's sampler keeps them out. Pure.

Each word is tokenized twice, as written and after a space (a word inside a sentence is usually
tokenized with the space in its first token); the second form is kept only when it is different
tokens of the same length. A one-token word is banned outright; a longer one has its last token
banned at the steps where the output's latest tokens are the word's other tokens. So a word can
still appear when a different tokenization of it is sampled: that is vLLM's rule too, and this
model follows vLLM rather than doing better.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Encode = Callable[[str], list[int]]


def bad_word_token_ids(words: Sequence[str], encode: Encode) -> tuple[tuple[int, ...], ...]:
    """The token sequences to keep out of the output, for ``encode`` (no special tokens added)."""
    sequences: list[tuple[int, ...]] = []
    for word in words:
        plain = tuple(encode(word.lstrip()))
        if not plain:
            continue
        sequences.append(plain)
        spaced = tuple(encode(" " + word.lstrip()))
        if spaced and len(spaced) == len(plain) and spaced[0] != plain[0]:
            sequences.append(spaced)
    return tuple(sequences)


def banned_tokens(sequences: Sequence[tuple[int, ...]], output_ids: Sequence[int]) -> list[int]:
    """The tokens that would complete a bad word after ``output_ids``."""
    banned = []
    for tokens in sequences:
        prefix = tokens[:-1]
        if not prefix or tuple(output_ids[-len(prefix) :]) == prefix:
            banned.append(tokens[-1])
    return banned
