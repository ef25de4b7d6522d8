"""The TensorRT-LLM ensemble's responses: ``text_output`` with a batch dimension, no finish reason,
no token counts, one decoding step per streamed response. Built as real protobufs with Triton's
own BYTES encoding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2
from tritonclient.utils import serialize_byte_tensor

from gateway.backend.contracts.tensors import describe_outputs
from gateway.backend.contracts.trtllm import parse_trtllm_outputs
from gateway.backend.types import GenerationChunk


def strings(values: list[bytes], shape: list[int]) -> bytes:
    return serialize_byte_tensor(np.array(values, dtype=np.object_).reshape(shape)).item()  # type: ignore[no-any-return]


def response(*outputs: tuple[str, str, list[int], bytes]) -> Any:
    message = service_pb2.ModelInferResponse(model_name="ensemble", model_version="1")
    for name, datatype, shape, raw in outputs:
        tensor = message.outputs.add()
        tensor.name = name
        tensor.datatype = datatype
        tensor.shape.extend(shape)
        message.raw_output_contents.append(raw)
    return service_pb2.ModelInferResponse.FromString(message.SerializeToString())


def parse_trtllm_response(response: Any, final: bool) -> GenerationChunk:
    return parse_trtllm_outputs(describe_outputs(response), response.raw_output_contents, final)


def text_output(values: list[bytes], shape: list[int]) -> tuple[str, str, list[int], bytes]:
    return ("text_output", "BYTES", shape, strings(values, shape))


@pytest.mark.parametrize("shape", [[1, 1], [1]])
def test_one_step_is_one_token_of_one_sequence(shape: list[int]) -> None:
    chunk = parse_trtllm_response(response(text_output([b" world"], shape)), False)
    assert chunk == GenerationChunk((b" world",), (None,), None, (1,), None, False)


def test_several_elements_on_the_second_dimension_are_one_text() -> None:
    chunk = parse_trtllm_response(response(text_output([b"ab", b"c", b""], [1, 3])), False)
    assert chunk.text == (b"abc",)
    assert chunk.num_output_tokens == (1,)


def test_an_empty_step_counts_no_token() -> None:
    # A step without new text (such as an empty last response) is no token.
    chunk = parse_trtllm_response(response(text_output([b""], [1, 1])), True)
    assert chunk == GenerationChunk((b"",), (None,), None, (0,), None, True)


def test_a_response_without_text_output_counts_no_token() -> None:
    chunk = parse_trtllm_response(response(), True)
    assert chunk == GenerationChunk((b"",), (None,), None, (0,), None, True)


def test_a_partial_utf8_character_is_kept_raw() -> None:
    euro = "€".encode()
    assert parse_trtllm_response(response(text_output([euro[:1]], [1, 1])), False).text == (euro[:1],)


def test_the_ensembles_other_outputs_are_ignored_in_any_order() -> None:
    others = [
        ("cum_log_probs", "FP32", [1, 1], np.array([[-1.5]], dtype=np.float32).tobytes()),
        ("output_log_probs", "FP32", [1, 1, 1], np.array([[[-0.5]]], dtype=np.float32).tobytes()),
        ("batch_index", "INT32", [1, 1], np.array([[0]], dtype=np.int32).tobytes()),
    ]
    text = text_output([b"tok"], [1, 1])
    for outputs in ([text, *others], [*others, text], [others[0], text, *others[1:]]):
        chunk = parse_trtllm_response(response(*outputs), False)
        assert chunk == GenerationChunk((b"tok",), (None,), None, (1,), None, False)


def test_steps_of_a_stream_add_up_to_the_text_and_token_count() -> None:
    pieces = [b"Hel", b"lo", b",", b" wor", b"ld", b""]
    chunks = [
        parse_trtllm_response(response(text_output([p], [1, 1])), i == len(pieces) - 1) for i, p in enumerate(pieces)
    ]
    assert b"".join(c.text[0] for c in chunks) == b"Hello, world"
    assert sum(c.num_output_tokens[0] for c in chunks if c.num_output_tokens) == 5
    assert [c.final for c in chunks] == [False] * 5 + [True]
    assert all(c.finish_reason == (None,) for c in chunks)
