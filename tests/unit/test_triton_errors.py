"""How the backend's readers turn one ``ModelStreamInferResponse`` message into a chunk (the FINAL
flag, every sequence, a TensorRT-LLM contract's reader), or into the typed error an in-stream
error message carries (classified by ``error_table.py``, tested rule by rule in
``test_error_table.py``, whose texts these are)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2
from tritonclient.utils import serialize_byte_tensor

from gateway.backend import triton
from gateway.backend.contracts.trtllm_text import TextContract
from gateway.backend.types import GenerationChunk, GenerationRequest, ModelInterface, TensorSpec
from gateway.errors import BackendError, GatewayError
from tests.unit.test_error_table import OTHER_WORDINGS, REAL, Case


def text_response(*texts: bytes, finish: bytes | None = None) -> Any:
    response = service_pb2.ModelInferResponse(model_name="m", id="r")
    tensors = [("text_output", list(texts))]
    if finish is not None:
        tensors.append(("finish_reason", [finish] * len(texts)))
    for name, values in tensors:
        tensor = response.outputs.add(name=name, datatype="BYTES", shape=[len(values)])
        assert tensor.name == name
        response.raw_output_contents.append(serialize_byte_tensor(np.array(values, dtype=np.object_)).item())
    return response


def message(response: Any | None = None, *, final: Any = None, error: str = "") -> bytes:
    reply = service_pb2.ModelStreamInferResponse(error_message=error)
    if response is not None:
        reply.infer_response.CopyFrom(response)
    if final is not None:
        parameter = reply.infer_response.parameters["triton_final_response"]
        if isinstance(final, bool):
            parameter.bool_param = final
        else:
            parameter.string_param = final
    return reply.SerializeToString()


def test_reader_final_flag_comes_from_the_response_parameter() -> None:
    read = triton.vllm_reader()
    assert read(message(text_response(b"a", finish=b"stop"), final=True)) == GenerationChunk(
        (b"a",), ("stop",), None, None, None, True
    )
    assert read(message(text_response(b"a", finish=b"None"), final=False)).final is False
    assert read(message(text_response(b"a"))).final is False
    # A parameter of another kind is not a true bool.
    assert read(message(text_response(b"a"), final="true")).final is False


def test_reader_final_without_data() -> None:
    assert triton.vllm_reader()(message(final=True)) == GenerationChunk((), (), None, None, None, True)


def test_reader_parses_every_sequence() -> None:
    chunk = triton.vllm_reader()(message(text_response(b"a", b"b", finish=b"length"), final=True))
    assert chunk.text == (b"a", b"b")
    assert chunk.finish_reason == ("length", "length")


ENSEMBLE = TextContract(
    ModelInterface(
        {
            "text_input": TensorSpec("text_input", "BYTES", (1,)),
            "max_tokens": TensorSpec("max_tokens", "INT32", (1,)),
            "stream": TensorSpec("stream", "BOOL", (1,), True),
            "exclude_input_in_output": TensorSpec("exclude_input_in_output", "BOOL", (1,), True),
        },
        decoupled=True,
        max_batch_size=8,
        platform="ensemble",
    ),
    layout="ensemble",
    cumulative=False,
    echoes=True,
)
ENSEMBLE_REQUEST = GenerationRequest("r", "ensemble", "hi", {"max_tokens": 4}, contract=ENSEMBLE)


def ensemble_reader() -> Any:
    return triton.contract_reader(ENSEMBLE, ENSEMBLE_REQUEST)


def test_contract_reader_reads_by_the_ensemble_contract() -> None:
    response = service_pb2.ModelInferResponse(model_name="ensemble")
    response.outputs.add(name="text_output", datatype="BYTES", shape=[1, 1])
    response.raw_output_contents.append(serialize_byte_tensor(np.array([[b"tok"]], dtype=np.object_)).item())
    # No num_output_tokens declared: no counts (the core counts the text).
    assert ensemble_reader()(message(response)) == GenerationChunk((b"tok",), (None,), None, None, None, False)
    assert ensemble_reader()(message(response, final=True)).final is True


@pytest.mark.parametrize("case", REAL + OTHER_WORDINGS, ids=lambda case: f"{case.rule}:{case.message[:40]}")
def test_reader_raises_the_error_a_message_carries(case: Case) -> None:
    with pytest.raises(GatewayError) as info:
        triton.vllm_reader()(message(error=case.message))
    assert type(info.value) is case.error
    assert info.value.param == case.param


def test_reader_error_wins_over_the_data_beside_it() -> None:
    # The vLLM backend sends its error with a text_output of "N/A" and the FINAL flag.
    data = message(text_response(b"N/A"), final=True, error="Error generating stream: boom")
    with pytest.raises(BackendError, match="Error generating stream: boom"):
        triton.vllm_reader()(data)
    with pytest.raises(BackendError):
        ensemble_reader()(data)
