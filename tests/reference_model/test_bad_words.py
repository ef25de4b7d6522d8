"""bad_words → token sequences and the tokens banned after an output (pure; a toy tokenizer)."""

from __future__ import annotations

from bad_words import bad_word_token_ids, banned_tokens

VOCAB = {"ab": [1, 2], " ab": [3, 2], "x": [7], " x": [8], "long": [4, 5, 6], " long": [9, 5]}


def encode(text: str) -> list[int]:
    return VOCAB.get(text, [])


def test_each_word_is_tokenized_as_written_and_after_a_space_when_that_differs_in_first_token_only() -> None:
    assert bad_word_token_ids(["ab", "x", "long"], encode) == ((1, 2), (3, 2), (7,), (8,), (4, 5, 6))


def test_a_one_token_word_is_always_banned_a_longer_one_only_after_its_other_tokens() -> None:
    sequences = bad_word_token_ids(["ab", "x"], encode)
    assert sorted(banned_tokens(sequences, [])) == [7, 8]
    assert sorted(banned_tokens(sequences, [5, 1])) == [2, 7, 8]
    assert sorted(banned_tokens(sequences, [1, 5])) == [7, 8]


def test_a_word_that_tokenizes_to_nothing_bans_nothing() -> None:
    assert bad_word_token_ids(["unknown"], encode) == ()
