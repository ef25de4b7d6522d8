"""What the TensorRT-LLM layouts share: vLLM sampling fields → their tensors, guided decoding,
LoRA adapters by task id, and the refusals that name what a model cannot take.

Each layout names its inputs differently (the ensemble's ``top_k`` is ``runtime_top_k`` inside
``tensorrt_llm`` and ``sampling_param_top_k`` in the LLM-API model; ``seed`` was ``random_seed``
and ``min_tokens`` ``min_length`` in older releases), so a field maps to candidate names tried in
order against what the model declares. A field with no declared input is refused by name rather
than dropped: a client that asked for it would otherwise get an answer that ignored it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gateway.backend.contracts.interface import TensorValueError, add_declared
from gateway.backend.contracts.tensors import add_tensor
from gateway.backend.types import GenerationRequest, ModelInterface
from gateway.errors import InvalidRequestError

Transform = Callable[[Any], Any]
"""A field's value → the value sent; None drops the field (its off value)."""


def _top_k(value: Any) -> Any:
    return 0 if int(value) == -1 else int(value)  # vLLM's -1 (off) is TensorRT-LLM's 0; it checks top_k >= 0


def _seed(value: Any) -> Any:
    return int(value) % 2**64  # vLLM's int64 seed in TensorRT-LLM's UINT64


@dataclass(frozen=True, slots=True)
class FieldMap:
    """A layout's scalar sampling fields: vLLM name → (candidate input names, transform)."""

    fields: Mapping[str, tuple[tuple[str, ...], Transform | None]]


ENSEMBLE_FIELDS = FieldMap(
    {
        "max_tokens": (("max_tokens",), None),
        "temperature": (("temperature",), None),
        "top_p": (("top_p",), None),
        "top_k": (("top_k",), _top_k),
        "frequency_penalty": (("frequency_penalty",), None),
        "presence_penalty": (("presence_penalty",), None),
        "repetition_penalty": (("repetition_penalty",), None),
        "length_penalty": (("length_penalty",), None),
        "min_tokens": (("min_tokens", "min_length"), None),
        "seed": (("seed", "random_seed"), _seed),
    }
)
TOKENS_FIELDS = FieldMap(
    {
        "max_tokens": (("request_output_len",), None),
        "temperature": (("temperature",), None),
        "top_p": (("runtime_top_p",), None),
        "top_k": (("runtime_top_k",), _top_k),
        "frequency_penalty": (("frequency_penalty",), None),
        "presence_penalty": (("presence_penalty",), None),
        "repetition_penalty": (("repetition_penalty",), None),
        "length_penalty": (("len_penalty",), None),
        "min_tokens": (("min_tokens", "min_length"), None),
        "seed": (("seed", "random_seed"), _seed),
    }
)
LLMAPI_FIELDS = FieldMap(
    {
        "max_tokens": (("sampling_param_max_tokens",), None),
        "temperature": (("sampling_param_temperature",), None),
        "top_p": (("sampling_param_top_p",), None),
        "top_k": (("sampling_param_top_k",), _top_k),
        "frequency_penalty": (("sampling_param_frequency_penalty",), None),
        "presence_penalty": (("sampling_param_presence_penalty",), None),
        "seed": (("sampling_param_seed",), _seed),
    }
)

PARAM = {
    "structured_outputs": "response_format",
    "lora_name": "model",
    "extra_args": "vllm_xargs",
    "logprobs": "logprobs",
}
"""Where a refused field came from in the client's request, when the name differs."""

GATEWAY_SIDE = frozenset({"stop", "include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens"})
"""Done by the gateway itself (stop strings are cut in the core whatever the model does;
special tokens are the detokenizer's or the postprocessing step's), never sent as such."""


def refuse(request: GenerationRequest, layout: str, key: str, why: str = "") -> InvalidRequestError:
    """The 400 for a field the model cannot take, naming the field and the layout."""
    param = PARAM.get(key, key)
    reason = why or "the model declares no input for it"
    return InvalidRequestError(
        f"'{param}' is not supported by the model '{request.model}' (TensorRT-LLM {layout}: {reason})", param=param
    )


def add_scalars(
    infer: Any,
    interface: ModelInterface,
    request: GenerationRequest,
    layout: str,
    fields: FieldMap,
    handled: frozenset[str],
) -> None:
    """Every sampling field as its declared tensor; ``handled``: fields the layout sends itself."""
    for key, value in request.sampling.items():
        if value is None or key in GATEWAY_SIDE or key in handled:
            continue
        if key == "n":
            if value != 1:
                raise refuse(request, layout, "n", "one sequence per request; the gateway sends one request per choice")
            continue
        spec = fields.fields.get(key)
        name = next((n for n in spec[0] if n in interface.inputs), None) if spec else None
        if spec is None or name is None:
            raise refuse(request, layout, key)
        sent = spec[1](value) if spec[1] is not None else value
        try:
            add_declared(infer, interface, name, [sent])
        except TensorValueError as exc:
            raise refuse(request, layout, key, str(exc)) from None


def add_flag(infer: Any, interface: ModelInterface, name: str, value: bool) -> bool:
    """A BOOL input where the model declares it; whether it did."""
    if name not in interface.inputs:
        return False
    add_declared(infer, interface, name, [value])
    return True


_GUIDES = {"json": "json_schema", "json_object": "json", "regex": "regex", "grammar": "ebnf_grammar"}
_IGNORED_OPTIONS = frozenset({"disable_any_whitespace", "disable_fallback", "disable_additional_properties"})


def guide_of(structured: str) -> tuple[str, str]:
    """vLLM's ``structured_outputs`` (a JSON string) → TensorRT-LLM's (guide type, guide).
    ``choice`` becomes the regex of its alternatives, as vLLM compiles it."""
    given = json.loads(structured)
    if "choice" in given:
        return "regex", "(" + "|".join(re.escape(str(c)) for c in given["choice"]) + ")"
    for key, guide_type in _GUIDES.items():
        if key in given:
            value = given[key]
            if key == "json":
                return guide_type, value if isinstance(value, str) else json.dumps(value)
            return guide_type, "" if key == "json_object" else str(value)
    raise ValueError(f"no constraint TensorRT-LLM can enforce in {sorted(given)}")


def add_guide(
    infer: Any, interface: ModelInterface, request: GenerationRequest, layout: str, enabled: bool = True
) -> None:
    """``enabled``: the engine can enforce a guide (its ``tensorrt_llm`` model sets
    ``guided_decoding_backend``); a guide it would ignore is refused, never sent."""
    structured = request.sampling.get("structured_outputs")
    if structured is None:
        return
    names = ("guided_decoding_guide_type", "guided_decoding_guide")
    if not all(n in interface.inputs for n in names):
        raise refuse(request, layout, "structured_outputs", "the model declares no guided_decoding inputs")
    if not enabled:
        raise refuse(
            request, layout, "structured_outputs", "its tensorrt_llm model sets no guided_decoding_backend parameter"
        )
    extra = set(json.loads(structured)) - set(_GUIDES) - {"choice"} - _IGNORED_OPTIONS
    if extra:
        raise refuse(request, layout, "structured_outputs", f"guided decoding has no {', '.join(sorted(extra))}")
    try:
        guide_type, guide = guide_of(structured)
    except ValueError as exc:
        raise refuse(request, layout, "structured_outputs", str(exc)) from None
    add_declared(infer, interface, names[0], [guide_type])
    add_declared(infer, interface, names[1], [guide])


@dataclass(frozen=True, slots=True)
class LoraAdapter:
    """An adapter in TensorRT-LLM's format: ``model.lora_weights.npy`` ([M, D·Hi + Ho·D], FP16)
    and ``model.lora_config.npy`` ([M, 3], INT32) in ``directory``, known to the engine by
    ``task_id`` (1.. in ``multi_lora.json``'s order, as Triton's own OpenAI frontend numbers them)."""

    task_id: int
    directory: Path
    _loaded: dict[str, Any] = field(default_factory=dict, compare=False)

    def tensors(self) -> tuple[tuple[int, ...], bytes, tuple[int, ...], bytes]:
        """(weights shape, FP16 bytes, config shape, INT32 bytes), read once."""
        if not self._loaded:
            weights = np.load(self.directory / "model.lora_weights.npy")
            config = np.load(self.directory / "model.lora_config.npy")
            weights = weights.reshape(-1, weights.shape[-1])  # a saved leading batch dim is dropped
            config = config.reshape(-1, config.shape[-1])
            self._loaded["tensors"] = (
                tuple(weights.shape),
                weights.astype("<f2").tobytes(),
                tuple(config.shape),
                config.astype("<i4").tobytes(),
            )
        loaded: tuple[tuple[int, ...], bytes, tuple[int, ...], bytes] = self._loaded["tensors"]
        return loaded


def add_lora(
    infer: Any,
    interface: ModelInterface,
    request: GenerationRequest,
    layout: str,
    adapters: Mapping[str, LoraAdapter],
    weights: bool,
) -> None:
    name = request.sampling.get("lora_name")
    if name is None:
        return
    adapter = adapters.get(name)
    if "lora_task_id" not in interface.inputs:
        raise refuse(request, layout, "lora_name", "the model declares no lora_task_id input")
    if adapter is None:  # listed in multi_lora.json, but its folder is not found here
        raise refuse(
            request,
            layout,
            "lora_name",
            f"the gateway cannot read the adapter '{name}' (model.lora_weights.npy and model.lora_config.npy "
            "in the folder multi_lora.json names)",
        )
    add_declared(infer, interface, "lora_task_id", [adapter.task_id])
    if weights:
        w_shape, w_raw, c_shape, c_raw = adapter.tensors()
        batch = [1] if interface.max_batch_size > 0 else []
        add_tensor(infer, "lora_weights", "FP16", [*batch, *w_shape], w_raw)
        add_tensor(infer, "lora_config", "INT32", [*batch, *c_shape], c_raw)


def task_of(request: GenerationRequest, adapters: Mapping[str, LoraAdapter]) -> int | None:
    name = request.sampling.get("lora_name")
    adapter = adapters.get(name) if name is not None else None
    return adapter.task_id if adapter is not None else None


def words(stops: Sequence[str]) -> list[str]:
    return [s for s in stops if s]
