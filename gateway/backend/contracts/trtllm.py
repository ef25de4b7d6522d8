"""The TensorRT-LLM ensemble contract: vLLM-style sampling parameters → the ensemble's tensors.

The ensemble takes each sampling field as its own tensor with a batch dimension (``[1, 1]``), stop
words as a ``[1, k]`` BYTES tensor, and answers ``text_output`` only: no finish reason, no token
counts (each streamed response is one decoding step, i.e. one token). Which tensors a given
ensemble declares varies between TensorRT-LLM releases (``seed`` was ``random_seed``), so the
request is built from the model's declared inputs, and a field the model cannot take is refused
by name instead of being dropped. Knows nothing of OpenAI: it speaks vLLM ``SamplingParams`` names.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tritonclient.grpc import service_pb2

from gateway.backend.contracts.tensors import Outputs, add_tensor, pack_bytes, split_bytes
from gateway.backend.types import GenerationChunk, GenerationRequest
from gateway.errors import InvalidRequestError

# SamplingParams field → (candidate tensor names in preference order, datatype, packer)
_SCALARS: dict[str, tuple[tuple[str, ...], str, Callable[[Any], bytes]]] = {
    "max_tokens": (("max_tokens",), "INT32", lambda v: struct.pack("<i", int(v))),
    "temperature": (("temperature",), "FP32", lambda v: struct.pack("<f", float(v))),
    "top_p": (("top_p", "runtime_top_p"), "FP32", lambda v: struct.pack("<f", float(v))),
    "top_k": (("top_k", "runtime_top_k"), "INT32", lambda v: struct.pack("<i", int(v))),
    "frequency_penalty": (("frequency_penalty",), "FP32", lambda v: struct.pack("<f", float(v))),
    "presence_penalty": (("presence_penalty",), "FP32", lambda v: struct.pack("<f", float(v))),
    "repetition_penalty": (("repetition_penalty",), "FP32", lambda v: struct.pack("<f", float(v))),
    "min_tokens": (("min_tokens", "min_length"), "INT32", lambda v: struct.pack("<i", int(v))),
    "seed": (("seed", "random_seed"), "UINT64", lambda v: struct.pack("<Q", int(v) % 2**64)),
}
# Where a refused field came from in the client's request, when the name differs.
_PARAM = {"structured_outputs": "response_format", "lora_name": "model", "extra_args": "vllm_xargs"}
# Handled by the gateway itself (stop strings are also cut there), or meaningless here.
_GATEWAY_SIDE = {"stop", "include_stop_str_in_output", "skip_special_tokens"}


def build_trtllm_request(request: GenerationRequest, inputs: frozenset[str]) -> Any:
    """The ``ModelInferRequest`` for an ensemble that declares ``inputs``."""
    infer = service_pb2.ModelInferRequest(model_name=request.model, id=request.request_id)
    add_tensor(infer, "text_input", "BYTES", [1, 1], pack_bytes(request.prompt.encode("utf-8")))
    if "stream" in inputs:
        # Always stream from the ensemble: each response is one step, which is how tokens are
        # counted for usage and finish_reason (the ensemble reports neither).
        add_tensor(infer, "stream", "BOOL", [1, 1], b"\x01")
    if "exclude_input_in_output" in inputs:
        add_tensor(infer, "exclude_input_in_output", "BOOL", [1, 1], b"\x01")
    if "beam_width" in inputs:
        add_tensor(infer, "beam_width", "INT32", [1, 1], struct.pack("<i", 1))
    for key, value in request.sampling.items():
        if key in _GATEWAY_SIDE or value is None:
            continue
        if key == "n":
            if value != 1:
                raise InvalidRequestError(
                    f"'{request.model}' (TensorRT-LLM) generates one choice per request", param="n"
                )
            continue
        spec = _SCALARS.get(key)
        name = next((n for n in spec[0] if n in inputs), None) if spec else None
        if spec is None or name is None:
            param = _PARAM.get(key, key)
            raise InvalidRequestError(
                f"'{param}' is not supported by the model '{request.model}' (TensorRT-LLM)", param=param
            )
        add_tensor(infer, name, spec[1], [1, 1], spec[2](value))
    stops = [s for s in request.sampling.get("stop") or () if s]
    if stops and "stop_words" in inputs:
        add_tensor(
            infer, "stop_words", "BYTES", [1, len(stops)], b"".join(pack_bytes(s.encode("utf-8")) for s in stops)
        )
    return infer


def parse_trtllm_outputs(outputs: Outputs, raws: Sequence[bytes], final: bool) -> GenerationChunk:
    """``text_output`` ([1, 1] or [1]) as one sequence; one token per non-empty response."""
    texts: tuple[bytes, ...] = ()
    for (name, _datatype), raw in zip(outputs, raws, strict=False):
        if name == "text_output":
            texts = split_bytes(raw)
    text = b"".join(texts)
    return GenerationChunk((text,), (None,), None, (1,) if text else (0,), None, final)


def is_trtllm(inputs: Mapping[str, Any] | frozenset[str]) -> bool:
    """An ensemble-style model: per-field tensors, no ``sampling_parameters``."""
    return "text_input" in inputs and "max_tokens" in inputs and "sampling_parameters" not in inputs
