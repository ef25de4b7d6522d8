"""The backend contracts: one per model layout, each chosen from the model's declared interface.

| layout | told by | module |
|---|---|---|
| ``vllm`` | a ``sampling_parameters`` input | ``vllm.py`` |
| ``tensorrt_llm`` | ``input_ids`` and ``request_output_len`` | ``trtllm_tokens.py`` |
| ``llmapi`` | ``text_input`` and ``sampling_param_*`` inputs | ``trtllm_llmapi.py`` |
| ``bls`` | those, and an ``accumulate_tokens`` or ``tensorrt_llm_model_name`` parameter | ``trtllm_text.py`` |
| ``ensemble`` | ``text_input`` and ``max_tokens`` | ``trtllm_text.py`` |

``model_files.<model>.layout`` overrides the detection.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.backend.contracts.base import Contract
from gateway.backend.contracts.trtllm_fields import LoraAdapter
from gateway.backend.contracts.trtllm_llmapi import LlmApiContract
from gateway.backend.contracts.trtllm_text import TextContract
from gateway.backend.contracts.trtllm_tokens import TokensContract
from gateway.backend.contracts.vllm import VLLM
from gateway.backend.types import ModelInterface

LAYOUTS = ("vllm", "ensemble", "bls", "tensorrt_llm", "llmapi")
TRTLLM_LAYOUTS = frozenset(LAYOUTS[1:])


def detect_layout(interface: ModelInterface) -> str | None:
    """The layout a model's inputs and parameters say; None: no generating layout."""
    inputs = interface.inputs
    if "sampling_parameters" in inputs:
        return "vllm"
    if "input_ids" in inputs and "request_output_len" in inputs:
        return "tensorrt_llm"
    if "text_input" in inputs and any(name.startswith("sampling_param_") for name in inputs):
        return "llmapi"
    if "text_input" in inputs and "max_tokens" in inputs:
        parameters = interface.parameters
        if "accumulate_tokens" in parameters or "tensorrt_llm_model_name" in parameters:
            return "bls"
        return "ensemble"
    return None


def is_true(value: str | None) -> bool:
    """A TensorRT-LLM config parameter's boolean (its backends take ``true``/``1``; anything
    else, or none, is false)."""
    return (value or "").strip().lower() in ("true", "1", "yes")


def guides(interface: ModelInterface) -> bool:
    """Whether a ``tensorrt_llm`` model enforces guided decoding: it needs its
    ``guided_decoding_backend`` parameter (``xgrammar``); without it a guide would be ignored."""
    value = interface.parameters.get("guided_decoding_backend", "").strip()
    return bool(value) and not value.startswith("${")


def llm_step_name(layout: str, interface: ModelInterface, models: Mapping[str, ModelInterface]) -> str | None:
    """The ``tensorrt_llm`` model an ensemble or BLS model runs, when it is served here."""
    if layout == "bls":
        name = interface.parameters.get("tensorrt_llm_model_name") or "tensorrt_llm"
        return name if name in models and detect_layout(models[name]) == "tensorrt_llm" else None
    if layout == "ensemble":
        return next((s for s in interface.steps if s in models and detect_layout(models[s]) == "tensorrt_llm"), None)
    return None


def build_contract(
    layout: str,
    interface: ModelInterface,
    *,
    step: ModelInterface | None = None,
    step_name: str | None = None,
    adapters: Mapping[str, LoraAdapter] | None = None,
    kv_block_tokens: int | None = None,
) -> Contract:
    """The contract of a model of ``layout``; ``step``: the ``tensorrt_llm`` model an ensemble
    or BLS runs (its ``exclude_input_in_output`` parameter says whether a whole answer echoes)."""
    if layout == "tensorrt_llm":
        echoes = not is_true(interface.parameters.get("exclude_input_in_output"))
        return TokensContract(
            interface, echoes=echoes, adapters=adapters, guided=guides(interface), kv_block_tokens=kv_block_tokens
        )
    if layout == "llmapi":
        return LlmApiContract(interface)
    if layout in ("ensemble", "bls"):
        echoes = step is None or not is_true(step.parameters.get("exclude_input_in_output"))
        cumulative = layout == "bls" and is_true(interface.parameters.get("accumulate_tokens"))
        guided = step is None or guides(step)  # a step not served here: the declared inputs say
        # An ensemble's steps are not cancelled with it: its tensorrt_llm step is stopped by name.
        stop_step = (step_name, step) if layout == "ensemble" and step is not None and step_name else None
        return TextContract(
            interface,
            layout=layout,
            cumulative=cumulative,
            echoes=echoes,
            adapters=adapters,
            guided=guided,
            stop_step=stop_step,
            kv_block_tokens=kv_block_tokens,
        )
    return VLLM


__all__ = ["Contract", "LoraAdapter", "LAYOUTS", "TRTLLM_LAYOUTS", "build_contract", "detect_layout", "llm_step_name"]
