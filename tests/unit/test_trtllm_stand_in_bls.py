"""The BLS rules (tests/trtllm_stand_ins/bls.py): mapping, accumulation, stop words as text."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trtllm_stand_ins.bls import (
    BlsError,
    TextStops,
    TokenAccumulator,
    engine_inputs,
    preprocessing_inputs,
    stop_strings,
)


def test_preprocessing_gets_the_renamed_text_inputs() -> None:
    request = {
        "text_input": np.array([[b"hi"]], object),
        "max_tokens": np.array([[3]], np.int32),
        "stop_words": np.array([[b"x"]], object),
    }
    assert set(preprocessing_inputs(request)) == {"QUERY", "REQUEST_OUTPUT_LEN", "STOP_WORDS_DICT"}
    with pytest.raises(BlsError, match="image_url_input"):
        preprocessing_inputs({**request, "image_url_input": np.array([[b"u"]], object)})


def test_the_model_gets_everything_but_num_return_sequences() -> None:
    request = {
        "stream": np.array([[True]]),
        "top_k": np.array([[3]], np.int32),
        "num_return_sequences": np.array([[4]], np.int32),
        "return_num_output_tokens": np.array([[True]]),
        "length_penalty": np.array([[1.0]], np.float32),
    }
    preprocessed = {"INPUT_ID": np.array([[1, 2]], np.int32), "EMBEDDING_BIAS": np.zeros((1, 0), np.float32)}
    inputs = engine_inputs(request, preprocessed)
    assert set(inputs) == {"input_ids", "streaming", "runtime_top_k", "return_num_output_tokens", "len_penalty"}


def test_without_accumulation_each_response_is_decoded_alone() -> None:
    accumulator = TokenAccumulator(accumulate=False)
    ids, lengths = np.array([[[5, 6]]], np.int32), np.array([[2]], np.int32)
    assert accumulator.tokens_for(ids, lengths, 0) == (ids, lengths)


def test_accumulation_concatenates_per_batch_index() -> None:
    accumulator = TokenAccumulator(accumulate=True)
    accumulator.tokens_for(np.array([[[5, 6, -1]]], np.int32), np.array([[2]], np.int32), 0)
    accumulator.tokens_for(np.array([[[9]]], np.int32), np.array([[1]], np.int32), 1)
    tokens, lengths = accumulator.tokens_for(np.array([[[7]]], np.int32), np.array([[1]], np.int32), 0)
    assert tokens.tolist() == [[[5, 6, 7]]] and lengths.tolist() == [[3]]
    with pytest.raises(BlsError, match="beam width = 1"):
        accumulator.tokens_for(np.zeros((1, 2, 1), np.int32), np.ones((1, 2), np.int32), 0)


def test_not_streaming_the_text_is_cut_after_the_first_stop_string() -> None:
    assert TextStops(["END", "xy"], cumulative=True).apply("abc xy def END") == "abc xy"


def test_streaming_deltas_the_stop_may_span_responses_and_later_text_is_blank() -> None:
    stops = TextStops(["STOP"], cumulative=False)
    assert [stops.apply(t) for t in ["ab", "cST", "OPde", "more"]] == ["ab", "cST", "OP", ""]
    assert stops.stopped


def test_streaming_cumulative_texts_are_cut_the_same_way() -> None:
    stops = TextStops(["STOP"], cumulative=True)
    assert [stops.apply(t) for t in ["ab", "abcST", "abcSTOPde"]] == ["ab", "abcST", "abcSTOP"]


def test_stop_strings_come_from_the_stop_words_input() -> None:
    assert stop_strings({"stop_words": np.array([[b"a", b"", b"b"]], object)}) == ["a", "b"]
    assert stop_strings({}) == []
