"""A tensorrt_llm request's tensors → what to generate (tests/trtllm_stand_ins/request_tensors.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.trtllm_stand_ins.errors import BATCH_NOT_DECOUPLED, STREAMING_NOT_DECOUPLED, ConversionError
from tests.trtllm_stand_ins.request_tensors import Guide, cancel_target, parse_request


def request(**extra: Any) -> dict[str, np.ndarray]:
    arrays = {
        "input_ids": np.array([[1, 50, 60, 0, 0]], dtype=np.int32),
        "input_lengths": np.array([[3]], dtype=np.int32),
        "request_output_len": np.array([[5]], dtype=np.int32),
    }
    arrays.update({name: np.asarray(value) for name, value in extra.items()})
    return arrays


def parse(arrays: dict[str, np.ndarray], decoupled: bool = True, exclude: bool = False) -> Any:
    return parse_request(arrays, decoupled=decoupled, exclude_input_default=exclude)


def test_padding_is_cut_to_input_lengths_and_defaults_hold() -> None:
    (spec,) = parse(request())
    assert spec.prompt == (1, 50, 60) and spec.max_new_tokens == 5
    assert spec.end_id is None and not spec.streaming and not spec.exclude_input and spec.guide is None
    assert spec.flags.num_input_tokens is False and spec.flags.num_output_tokens is False


def test_scalars_may_come_reshaped_to_batch_only() -> None:
    (spec,) = parse(request(input_lengths=np.array([2], dtype=np.int32), end_id=np.array([2], dtype=np.int32)))
    assert spec.prompt == (1, 50) and spec.end_id == 2


def test_streaming_needs_decoupled_mode_with_the_backends_exact_words() -> None:
    with pytest.raises(ConversionError) as refused:
        parse(request(streaming=[[True]]), decoupled=False)
    assert (
        str(refused.value)
        == STREAMING_NOT_DECOUPLED
        == ("Streaming is only supported if model is deployed using decoupled mode.")
    )


def test_exclude_input_comes_from_the_request_else_from_the_model_parameter() -> None:
    assert parse(request(), exclude=True)[0].exclude_input is True
    assert parse(request(exclude_input_in_output=[[False]]), exclude=True)[0].exclude_input is False


def test_several_sequences_are_one_spec_each_and_need_decoupled_mode() -> None:
    arrays = request(
        input_ids=np.array([[1, 5], [1, 6]], dtype=np.int32),
        input_lengths=np.array([[2], [2]], dtype=np.int32),
        request_output_len=np.array([[3], [3]], dtype=np.int32),
        num_return_sequences=np.array([[2], [1]], dtype=np.int32),
    )
    specs = parse(arrays)
    assert [(s.batch_index, s.sequence_index, s.prompt) for s in specs] == [
        (0, 0, (1, 5)),
        (0, 1, (1, 5)),
        (1, 0, (1, 6)),
    ]
    assert specs[1].seed_offset == 1 and specs[0].batch_size == 2 and specs[0].num_sequences == 2
    with pytest.raises(ConversionError) as refused:
        parse(arrays, decoupled=False)
    assert str(refused.value) == BATCH_NOT_DECOUPLED


def test_guides_of_unknown_types_are_ignored() -> None:
    (spec,) = parse(
        request(
            guided_decoding_guide_type=np.array([[b"regex"]], dtype=object),
            guided_decoding_guide=np.array([[b"a+"]], dtype=object),
        )
    )
    assert spec.guide == Guide("regex", "a+")
    (ignored,) = parse(request(guided_decoding_guide_type=np.array([[b"xml"]], dtype=object)))
    assert ignored.guide is None


def test_an_empty_embedding_bias_is_ignored() -> None:
    assert parse(request(embedding_bias=np.zeros((1, 0), dtype=np.float32)))[0].embedding_bias is None


def test_stop_words_are_read_from_their_tensor() -> None:
    words = np.array([[[7, 8, 9], [2, 3, -1]]], dtype=np.int32)
    assert parse(request(stop_words_list=words))[0].stop_words == ((7, 8), (9,))


def test_lora_weights_need_their_config_and_a_task_id() -> None:
    weights, config = np.zeros((1, 1, 4), dtype=np.float16), np.zeros((1, 1, 3), dtype=np.int32)
    with pytest.raises(ConversionError, match="lora_task_id must be sent"):
        parse(request(lora_weights=weights, lora_config=config))
    with pytest.raises(ConversionError, match="must be sent together"):
        parse(request(lora_task_id=np.array([[1]], dtype=np.uint64), lora_weights=weights))
    (spec,) = parse(request(lora_task_id=np.array([[1]], dtype=np.uint64), lora_weights=weights, lora_config=config))
    assert spec.lora_task_id == 1 and spec.lora_weights is not None and spec.lora_weights.shape == (1, 4)


def test_inputs_the_stand_in_cannot_honour_are_refused_by_name() -> None:
    with pytest.raises(ConversionError, match="'prompt_embedding_table'"):
        parse(request(prompt_embedding_table=np.ones((1, 2, 4), dtype=np.float16)))
    with pytest.raises(ConversionError, match="lookahead"):
        parse(request(lookahead_window_size=np.array([[3]], dtype=np.int32)))
    (spec,) = parse(request(decoder_input_ids=np.array([[0]], dtype=np.int32)))  # what the ensemble always sends
    assert spec.prompt == (1, 50, 60)


def test_missing_or_bad_lengths_are_conversion_errors() -> None:
    with pytest.raises(ConversionError, match="input_lengths"):
        parse(request(input_lengths=np.array([[9]], dtype=np.int32)))
    arrays = request()
    del arrays["request_output_len"]
    with pytest.raises(ConversionError, match="request_output_len"):
        parse(arrays)


def test_a_stop_request_is_recognised() -> None:
    assert cancel_target(request(stop=[[True]])) and not cancel_target(request())
