"""The TensorRT-LLM ensemble request builder: tensors chosen among the model's declared inputs."""

from __future__ import annotations

import struct

import pytest

from gateway.backend.contracts.trtllm import build_trtllm_request, is_trtllm
from gateway.backend.types import GenerationRequest
from gateway.errors import InvalidRequestError

OLD_ENSEMBLE = frozenset({"text_input", "max_tokens", "stream", "random_seed", "runtime_top_k", "stop_words"})


def tensors(sampling: dict[str, object], inputs: frozenset[str]) -> dict[str, tuple[str, list[int], bytes]]:
    request = GenerationRequest(request_id="r", model="m", prompt="p", sampling=sampling, inputs=inputs)
    infer = build_trtllm_request(request, inputs)
    return {
        t.name: (t.datatype, list(t.shape), raw) for t, raw in zip(infer.inputs, infer.raw_input_contents, strict=False)
    }


def test_older_tensor_names_are_used_when_that_is_what_the_model_declares() -> None:
    sent = tensors({"max_tokens": 4, "seed": 9, "top_k": 2, "n": 1}, OLD_ENSEMBLE)
    assert sent["random_seed"] == ("UINT64", [1, 1], struct.pack("<Q", 9))
    assert sent["runtime_top_k"] == ("INT32", [1, 1], struct.pack("<i", 2))
    assert sent["max_tokens"] == ("INT32", [1, 1], struct.pack("<i", 4))
    assert sent["stream"] == ("BOOL", [1, 1], b"\x01")
    assert "seed" not in sent and "beam_width" not in sent


def test_stop_words_are_one_list_tensor() -> None:
    sent = tensors({"max_tokens": 4, "stop": ["a", "bc"]}, OLD_ENSEMBLE)
    assert sent["stop_words"] == ("BYTES", [1, 2], b"\x01\x00\x00\x00a\x02\x00\x00\x00bc")


@pytest.mark.parametrize(
    ("key", "param"),
    [
        ("temperature", "temperature"),
        ("structured_outputs", "response_format"),
        ("lora_name", "model"),
        ("logprobs", "logprobs"),
    ],
)
def test_a_field_the_model_cannot_take_is_refused_by_name(key: str, param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        tensors({"max_tokens": 4, key: "x" if key != "temperature" else 0.5}, OLD_ENSEMBLE)
    assert info.value.param == param


def test_n_above_one_is_refused() -> None:
    with pytest.raises(InvalidRequestError) as info:
        tensors({"max_tokens": 4, "n": 2}, OLD_ENSEMBLE)
    assert info.value.param == "n"


def test_contract_detection() -> None:
    assert is_trtllm(OLD_ENSEMBLE)
    assert not is_trtllm(frozenset({"text_input", "sampling_parameters", "stream"}))
    assert not is_trtllm(frozenset())
