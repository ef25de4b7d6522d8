"""The LLM-API model's rules (contract §1.6, §2.5-§2.7, §2.12), apart from Triton. Pure.

The stand-in reads the request the way the upstream model builds LLM-API ``SamplingParams``
(``sampling_param_*``, ``streaming``; ``max_tokens`` defaults to 32, the LLM API's default),
tokenizes the prompt with its own tokenizer and has the ``tensorrt_llm`` stand-in generate (one
engine for every stand-in). What it sends back is the LLM API's ``CompletionOutput``:

* ``text_output``: the **cumulative** text (every token so far decoded together), also while
  streaming; not streaming, the prompt's text comes first unless
  ``sampling_param_exclude_input_from_output`` is true (default false here);
* ``finish_reason`` / ``stop_reason`` only when ``return_finish_reason`` / ``return_stop_reason``:
  ``"None"`` while running, then ``"stop"`` (end id or a stop string; ``stop_reason`` is the stop
  string, else ``"None"``), ``"length"`` or ``"cancelled"``;
* ``cumulative_logprob`` with ``return_cumulative_logprob``, and the perf outputs with
  ``sampling_param_return_perf_metrics``: as **strings** although the config declares FP32/INT32,
  because the upstream model builds them with the text output's dtype; Triton 2.51 passes such a
  BYTES tensor through unchecked (seen on this machine), so a client gets what upstream sends.

Stop strings are matched on the cumulative text; the text is cut before the stop string (the LLM
API's default) and generation is stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tests.trtllm_stand_ins.errors import llmapi_message

Arrays = Mapping[str, NDArray[Any]]

DEFAULT_MAX_TOKENS = 32
CANCELLED_BY_CLIENT = "Request cancelled by client"
LORA_ALL_OR_NONE = "lora_id, lora_name, and lora_path must all be provided together"
FINISH_STOP, FINISH_LENGTH, FINISH_CANCELLED, RUNNING = "stop", "length", "cancelled", "None"


class LlmApiError(ValueError):
    """A request the model refuses; ``message`` is the full error text."""

    @property
    def message(self) -> str:
        return llmapi_message(str(self))


def _first(arrays: Arrays, name: str) -> object | None:
    array = arrays.get(name)
    if array is None or array.size == 0:
        return None
    value: object = array.reshape(-1)[0]
    return value.item() if isinstance(value, np.generic) else value


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class LoraRequest:
    lora_id: int
    name: str
    path: Path


@dataclass(frozen=True)
class LlmApiRequest:
    prompt: str
    streaming: bool = False
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    exclude_input: bool = False
    perf_metrics: bool = False
    return_finish_reason: bool = False
    return_stop_reason: bool = False
    return_cumulative_logprob: bool = False
    lora: LoraRequest | None = None


def _lora(arrays: Arrays) -> LoraRequest | None:
    lora_id, name, path = (_first(arrays, key) for key in ("lora_id", "lora_name", "lora_path"))
    given = [value is not None for value in (lora_id, name, path)]
    if not any(given):
        return None
    if not all(given):
        raise LlmApiError(LORA_ALL_OR_NONE)
    source = _text(_first(arrays, "lora_ckpt_source") or "hf")
    if source not in ("hf", "nemo"):
        raise LlmApiError(f"lora_ckpt_source must be 'hf' or 'nemo', got '{source}'")
    if source == "nemo":
        raise LlmApiError("the stand-in loads Hugging Face (peft) adapters only, not NeMo checkpoints")
    directory = Path(_text(path))
    if not directory.is_dir():
        raise LlmApiError(f"LoRA path {directory} does not exist on the server")
    return LoraRequest(lora_id=int(lora_id), name=_text(name), path=directory)  # type: ignore[call-overload]


def _optional(arrays: Arrays, name: str, kind: type) -> object | None:
    value = _first(arrays, name)
    return None if value is None else kind(value)


def parse_llmapi_request(arrays: Arrays) -> LlmApiRequest:
    text = arrays.get("text_input")
    if text is None or text.size == 0:
        raise LlmApiError("text_input is required")
    if text.ndim != 1:
        raise LlmApiError(
            f"text_input must be a 1-D tensor (this model has no batch dimension), got shape {list(text.shape)}"
        )
    if "image_url" in arrays:
        raise LlmApiError("the stand-in is text-only: image_url is not supported")
    best_of = _optional(arrays, "sampling_param_best_of", int)
    if best_of not in (None, 1):
        raise LlmApiError(f"the stand-in generates one sequence: sampling_param_best_of must be 1, got {best_of}")
    stop = arrays.get("sampling_param_stop")
    max_tokens = _optional(arrays, "sampling_param_max_tokens", int)
    return LlmApiRequest(
        prompt=_text(text.reshape(-1)[0]),
        streaming=bool(_first(arrays, "streaming") or False),
        max_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else int(max_tokens),  # type: ignore[call-overload]
        temperature=_optional(arrays, "sampling_param_temperature", float),  # type: ignore[arg-type]
        top_k=_optional(arrays, "sampling_param_top_k", int),  # type: ignore[arg-type]
        top_p=_optional(arrays, "sampling_param_top_p", float),  # type: ignore[arg-type]
        frequency_penalty=_optional(arrays, "sampling_param_frequency_penalty", float),  # type: ignore[arg-type]
        presence_penalty=_optional(arrays, "sampling_param_presence_penalty", float),  # type: ignore[arg-type]
        seed=_optional(arrays, "sampling_param_seed", int),  # type: ignore[arg-type]
        stop=tuple(_text(item) for item in stop.reshape(-1) if _text(item)) if stop is not None else (),
        exclude_input=bool(_first(arrays, "sampling_param_exclude_input_from_output") or False),
        perf_metrics=bool(_first(arrays, "sampling_param_return_perf_metrics") or False),
        return_finish_reason=bool(_first(arrays, "return_finish_reason") or False),
        return_stop_reason=bool(_first(arrays, "return_stop_reason") or False),
        return_cumulative_logprob=bool(_first(arrays, "return_cumulative_logprob") or False),
        lora=_lora(arrays),
    )


def engine_inputs(request: LlmApiRequest, prompt_ids: list[int], end_id: int, pad_id: int) -> dict[str, NDArray[Any]]:
    """The ``tensorrt_llm`` request for it (always streaming: the text is rebuilt here)."""
    inputs = {
        "input_ids": np.array([prompt_ids], dtype=np.int32),
        "input_lengths": np.array([[len(prompt_ids)]], dtype=np.int32),
        "request_output_len": np.array([[request.max_tokens]], dtype=np.int32),
        "end_id": np.array([[end_id]], dtype=np.int32),
        "pad_id": np.array([[pad_id]], dtype=np.int32),
        "streaming": np.array([[True]]),
        "exclude_input_in_output": np.array([[True]]),
        "return_log_probs": np.array([[request.return_cumulative_logprob]]),
        "return_perf_metrics": np.array([[request.perf_metrics]]),
    }
    for name, value, dtype in (
        ("temperature", request.temperature, np.float32),
        ("runtime_top_k", request.top_k, np.int32),
        ("runtime_top_p", request.top_p, np.float32),
        ("frequency_penalty", request.frequency_penalty, np.float32),
        ("presence_penalty", request.presence_penalty, np.float32),
        ("seed", request.seed, np.uint64),
    ):
        if value is not None:
            inputs[name] = np.array([[value]], dtype=dtype)
    return inputs


@dataclass
class CompletionState:
    """One request's output so far, as the LLM API's CompletionOutput holds it."""

    request: LlmApiRequest
    tokens: list[int]
    text: str = ""
    finish_reason: str = RUNNING
    stop_reason: str | None = None
    cumulative_logprob: float = 0.0

    def add(self, new_tokens: list[int], text_of: object) -> bool:
        """Take a response's tokens; ``text_of(ids) -> str`` decodes. True when a stop string ended it."""
        self.tokens.extend(new_tokens)
        text = text_of(self.tokens)  # type: ignore[operator]
        for stop in self.request.stop:
            at = text.find(stop)
            if at >= 0:
                self.text, self.finish_reason, self.stop_reason = text[:at], FINISH_STOP, stop
                return True
        self.text = text
        return False

    def end(self) -> None:
        """The generation ended by itself: the budget, or the end id."""
        if self.finish_reason == RUNNING:
            self.finish_reason = FINISH_LENGTH if len(self.tokens) >= self.request.max_tokens else FINISH_STOP


def _strings(values: list[object]) -> NDArray[Any]:
    return np.array([str(value).encode("utf-8") for value in values], dtype=object)


def llmapi_outputs(state: CompletionState, perf: Mapping[str, NDArray[Any]] | None = None) -> dict[str, NDArray[Any]]:
    request = state.request
    text = state.text if request.streaming or request.exclude_input else request.prompt + state.text
    outputs = {"text_output": _strings([text])}
    if request.return_finish_reason:
        outputs["finish_reason"] = _strings([state.finish_reason])
    if request.return_stop_reason:
        outputs["stop_reason"] = _strings([state.stop_reason])
    if request.return_cumulative_logprob:
        outputs["cumulative_logprob"] = _strings([state.cumulative_logprob])
    if request.perf_metrics and perf:
        outputs.update(perf_strings(perf))
    return outputs


def perf_strings(perf: Mapping[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
    """tensorrt_llm's perf outputs → the llmapi model's names, each as a string (see the docstring)."""

    def value(name: str) -> int:
        return int(perf[name].reshape(-1)[0]) if name in perf else 0

    reused, total = value("kv_cache_reused_blocks"), value("kv_cache_alloc_total_blocks")
    missed = max(total - reused, 0)
    outputs = {
        "kv_cache_reused_block": _strings([reused]),
        "kv_cache_missed_block": _strings([missed]),
        "kv_cache_alloc_new_blocks": _strings([value("kv_cache_alloc_new_blocks")]),
        "kv_cache_alloc_total_blocks": _strings([total]),
        "kv_cache_hit_rate": _strings([reused / total if total else 0.0]),
        "acceptance_rate": _strings([0.0]),
        "total_accepted_draft_tokens": _strings([0]),
        "total_draft_tokens": _strings([0]),
    }
    for name in ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns"):
        outputs[name] = _strings([value(name)])
    return outputs


def error_outputs() -> dict[str, NDArray[Any]]:
    """What accompanies an error response: ``text_output`` ``["N/A"]``."""
    return {"text_output": _strings(["N/A"])}
