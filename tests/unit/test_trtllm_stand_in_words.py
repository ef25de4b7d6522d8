"""Stop/bad words as the TensorRT-LLM preprocessing lays them out (tests/trtllm_stand_ins/words.py)."""

from __future__ import annotations

import numpy as np

from tests.trtllm_stand_ins.words import (
    encode_words,
    ends_with_any,
    from_words_tensor,
    parse_v05_words,
    to_words_tensor,
)

TABLE = {"stop": [7, 8], "end": [9], "": []}


def encode(word: str) -> list[int]:
    return TABLE[word]


def test_words_become_ids_and_cumulative_offsets_padded_with_zero_and_minus_one() -> None:
    tensor = to_words_tensor([["stop", "end"], ["end"]], encode)
    assert tensor.dtype == np.int32 and tensor.shape == (2, 2, 3)
    assert tensor[0].tolist() == [[7, 8, 9], [2, 3, -1]]
    assert tensor[1].tolist() == [[9, 0, 0], [1, -1, -1]]


def test_words_that_give_no_ids_are_dropped_and_no_words_give_width_zero() -> None:
    assert encode_words(["", "end"], encode) == ([9], [1])
    assert to_words_tensor([[""], []], encode).shape == (2, 2, 0)


def test_the_tensor_reads_back_as_token_sequences() -> None:
    tensor = to_words_tensor([["stop", "end"]], encode)
    assert from_words_tensor(tensor[0]) == ((7, 8), (9,))
    assert from_words_tensor(np.zeros((2, 0), dtype=np.int32)) == ()
    assert from_words_tensor(None) == ()


def test_bytes_elements_are_utf8_words() -> None:
    assert encode_words([b"stop"], encode) == ([7, 8], [2])


def test_v05_words_are_one_comma_separated_string() -> None:
    assert parse_v05_words(b"stop,end,,") == ["stop", "end"]
    assert parse_v05_words("") == []


def test_a_stop_sequence_matches_only_at_the_end_of_the_output() -> None:
    assert ends_with_any([1, 7, 8], [(7, 8)])
    assert not ends_with_any([7, 8, 1], [(7, 8)])
    assert not ends_with_any([8], [(7, 8)])
