"""TensorRT-LLM's LLM-API model (``llmapi/tensorrt_llm``, the layout NVIDIA now recommends):
``text_input``, ``streaming`` and ``sampling_param_*`` inputs, ``finish_reason`` output.

It has no batch dimension (``max_batch_size`` 0), streams only when deployed decoupled, sends
the whole text so far in every streamed response (``CompletionOutput.text``: turned into deltas
here), echoes the prompt unless ``sampling_param_exclude_input_from_output`` is sent, says why
a sequence ended (``stop``, ``length``) when asked, and reports no token counts (planning and the
core count with the model's tokenizer).
"""

from __future__ import annotations

from tritonclient.grpc import service_pb2

from gateway.backend.contracts.continuation import Continuation, by_text, constrained
from gateway.backend.contracts.interface import add_declared, add_priority
from gateway.backend.contracts.tensors import Outputs, ReadRaws, split_bytes
from gateway.backend.contracts.trtllm_fields import LLMAPI_FIELDS, add_flag, add_scalars, refuse, words
from gateway.backend.contracts.trtllm_text import TextReader
from gateway.backend.types import GenerationRequest, ModelInterface, Produced

_HANDLED = frozenset({"lora_name", "structured_outputs", "bad_words", "logprobs"})
_REASONS = {b"stop": "stop", b"length": "length", b"cancelled": "abort", b"timeout": "abort"}


def _finish(raw: bytes) -> str | None:
    values = split_bytes(raw)
    return _REASONS.get(values[0]) if values else None


class LlmApiContract:
    layout = "llmapi"
    reports_prompt_tokens = False
    reports_completion_tokens = False

    def __init__(self, interface: ModelInterface) -> None:
        self.interface = interface

    def streams(self, request: GenerationRequest) -> bool:
        return request.stream and self.interface.decoupled and "streaming" in self.interface.inputs

    def encode(self, request: GenerationRequest, *, lora_weights: bool = False) -> bytes:
        interface, layout = self.interface, self.layout
        for key, why in (
            ("lora_name", "its LoRA inputs are not wired into the model"),
            ("structured_outputs", "it declares no guided-decoding input"),
            ("bad_words", "it declares no bad-words input"),
            ("logprobs", "it returns only a cumulative log-probability"),
        ):
            if request.sampling.get(key) is not None:
                raise refuse(request, layout, key, why)
        infer = service_pb2.ModelInferRequest(model_name=request.model, id=request.request_id)
        add_priority(infer, request.priority)
        add_declared(infer, interface, "text_input", [request.prompt])
        add_flag(infer, interface, "streaming", self.streams(request))
        add_flag(infer, interface, "sampling_param_exclude_input_from_output", True)
        add_flag(infer, interface, "return_finish_reason", True)
        add_scalars(infer, interface, request, layout, LLMAPI_FIELDS, _HANDLED)
        stops = words(request.sampling.get("stop") or ())
        if stops and "sampling_param_stop" in interface.inputs:
            add_declared(infer, interface, "sampling_param_stop", stops)
        return bytes(infer.SerializeToString())

    def parser(self, request: GenerationRequest) -> TextReader:
        echoed = "sampling_param_exclude_input_from_output" not in self.interface.inputs and not self.streams(request)
        return TextReader(
            cumulative=True,
            strip=request.prompt.encode("utf-8") if echoed else None,
            subtract_prompt=False,
            finish=_finish,
        )

    def plan(self, outputs: Outputs) -> ReadRaws | None:
        return None

    def uses_lora_task(self, request: GenerationRequest) -> int | None:
        return None

    def stop_message(self, request: GenerationRequest) -> tuple[str, bytes] | None:
        return None  # a Triton cancel reaches the model itself

    def migratable(self, request: GenerationRequest) -> GenerationRequest | None:
        return None if constrained(request) else request

    def continuation(self, request: GenerationRequest, produced: Produced) -> Continuation | None:
        return by_text(request, produced)
