"""A ``tensorrt_llm`` request's tensors → one ``GenerationSpec`` per sequence to generate.

The tensors arrive with their batch dimension (``input_ids`` ``[batch, L]``, scalars ``[batch, 1]``
or ``[batch]``). Each batch item gives ``num_return_sequences`` sequences; more than one sequence
needs decoupled mode. Every check here runs while the request is converted, so a failure is a
``ConversionError`` whose text is the whole error (contract §2.7); the executor's own checks (LoRA,
beam width, prompt length, guides) come later, in the scheduler.

Inputs the stand-in cannot honour (p-tuning tables, encoder/decoder, draft tokens, M-RoPE,
disaggregated context, lookahead) are refused by name rather than ignored, except those that only
tune the KV cache (retention, ``prompt_table_extra_ids``) and the decoder prompt the ensemble always
passes (``decoder_input_ids``: ``[pad_id]`` from preprocessing, meaningless for a decoder-only
model). Pure numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tests.trtllm_stand_ins.errors import BATCH_NOT_DECOUPLED, STREAMING_NOT_DECOUPLED, ConversionError
from tests.trtllm_stand_ins.sampling import SamplingConfig, build_sampling_config
from tests.trtllm_stand_ins.words import from_words_tensor

GUIDE_TYPES = ("json", "json_schema", "regex", "ebnf_grammar")
"""Guide types that constrain the output; any other value is silently ignored (§2.10)."""

UNSUPPORTED_INPUTS = (
    "prompt_embedding_table",
    "prompt_vocab_size",
    "encoder_input_features",
    "encoder_output_lengths",
    "cross_attention_mask",
    "skip_cross_attn_blocks",
    "draft_input_ids",
    "draft_logits",
    "draft_acceptance_threshold",
    "mrope_rotary_cos_sin",
    "mrope_position_deltas",
    "context_phase_params",
)
LOOKAHEAD_INPUTS = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")

Arrays = Mapping[str, NDArray[Any]]


@dataclass(frozen=True)
class Guide:
    guide_type: str
    guide: str


@dataclass(frozen=True)
class OutputFlags:
    log_probs: bool = False
    context_logits: bool = False
    generation_logits: bool = False
    perf_metrics: bool = False
    num_input_tokens: bool = False
    num_output_tokens: bool = False


@dataclass(frozen=True)
class GenerationSpec:
    """One sequence to generate, with everything the scheduler needs to answer for it."""

    prompt: tuple[int, ...]
    max_new_tokens: int
    sampling: SamplingConfig
    end_id: int | None = None
    pad_id: int | None = None
    streaming: bool = False
    exclude_input: bool = False
    stop_words: tuple[tuple[int, ...], ...] = ()
    bad_words: tuple[tuple[int, ...], ...] = ()
    embedding_bias: NDArray[Any] | None = None
    guide: Guide | None = None
    lora_task_id: int | None = None
    lora_weights: NDArray[Any] | None = None
    lora_config: NDArray[Any] | None = None
    flags: OutputFlags = OutputFlags()
    batch_index: int = 0
    sequence_index: int = 0
    batch_size: int = 1
    num_sequences: int = 1
    seed_offset: int = 0


def _item(arrays: Arrays, name: str, index: int) -> NDArray[Any] | None:
    """Batch item ``index`` of an input, or None when it was not sent."""
    array = arrays.get(name)
    if array is None:
        return None
    if array.ndim == 0:
        return array.reshape(1)
    item: NDArray[Any] = array[index] if array.shape[0] > index else array[-1]
    return item


def _scalar(arrays: Arrays, name: str, index: int) -> object | None:
    item = _item(arrays, name, index)
    if item is None or item.size == 0:
        return None
    value: object = item.reshape(-1)[0]
    return value.item() if isinstance(value, np.generic) else value


def _int(arrays: Arrays, name: str, index: int) -> int | None:
    value = _scalar(arrays, name, index)
    return None if value is None else int(value)  # type: ignore[call-overload]


def _float(arrays: Arrays, name: str, index: int) -> float | None:
    value = _scalar(arrays, name, index)
    return None if value is None else float(value)  # type: ignore[arg-type]


def _bool(arrays: Arrays, name: str, index: int, default: bool = False) -> bool:
    value = _scalar(arrays, name, index)
    return default if value is None else bool(value)


def _text(arrays: Arrays, name: str, index: int) -> str | None:
    value = _scalar(arrays, name, index)
    if value is None:
        return None
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def batch_size_of(arrays: Arrays) -> int:
    for name in ("input_ids", "input_lengths", "request_output_len"):
        if name in arrays and arrays[name].ndim > 0:
            return int(arrays[name].shape[0])
    return 1


def _refuse_unsupported(arrays: Arrays, has_lookahead_parameters: bool) -> None:
    for name in UNSUPPORTED_INPUTS:
        if name in arrays and arrays[name].size > 0:
            raise ConversionError(f"The stand-in does not support the input '{name}'")
    if not has_lookahead_parameters:
        for name in LOOKAHEAD_INPUTS:
            if name in arrays:
                raise ConversionError(
                    f"'{name}' was sent, but the model was not configured with lookahead decoding parameters"
                )


def _prompt(arrays: Arrays, index: int) -> tuple[int, ...]:
    ids = _item(arrays, "input_ids", index)
    if ids is None:
        raise ConversionError("input_ids must be provided (the stand-in has no encoder_input_features)")
    length = _int(arrays, "input_lengths", index)
    if length is None:
        raise ConversionError("input_lengths must be provided")
    flat = ids.reshape(-1).astype(np.int64)
    if not 0 < length <= flat.size:
        raise ConversionError(f"input_lengths ({length}) must be in [1, {flat.size}], the length of input_ids")
    return tuple(int(token) for token in flat[:length])


def _guide(arrays: Arrays, index: int) -> Guide | None:
    guide_type = _text(arrays, "guided_decoding_guide_type", index)
    if guide_type not in GUIDE_TYPES:
        return None
    return Guide(guide_type, _text(arrays, "guided_decoding_guide", index) or "")


def _embedding_bias(arrays: Arrays, index: int) -> NDArray[Any] | None:
    bias = _item(arrays, "embedding_bias", index)
    if bias is None or bias.size == 0:
        return None  # an empty bias (what preprocessing sends without bias words) is ignored
    return bias.reshape(-1).astype(np.float32)


def _sampling(arrays: Arrays, index: int) -> SamplingConfig:
    return build_sampling_config(
        beam_width=_int(arrays, "beam_width", index),
        top_k=_int(arrays, "runtime_top_k", index),
        top_p=_float(arrays, "runtime_top_p", index),
        top_p_min=_float(arrays, "runtime_top_p_min", index),
        top_p_decay=_float(arrays, "runtime_top_p_decay", index),
        temperature=_float(arrays, "temperature", index),
        min_tokens=_int(arrays, "min_tokens", index),
        repetition_penalty=_float(arrays, "repetition_penalty", index),
        presence_penalty=_float(arrays, "presence_penalty", index),
        frequency_penalty=_float(arrays, "frequency_penalty", index),
        length_penalty=_float(arrays, "len_penalty", index),
        seed=_int(arrays, "seed", index),
        num_return_sequences=_int(arrays, "num_return_sequences", index),
    )


def _flags(arrays: Arrays, index: int) -> OutputFlags:
    return OutputFlags(
        log_probs=_bool(arrays, "return_log_probs", index),
        context_logits=_bool(arrays, "return_context_logits", index),
        generation_logits=_bool(arrays, "return_generation_logits", index),
        perf_metrics=_bool(arrays, "return_perf_metrics", index),
        num_input_tokens=_bool(arrays, "return_num_input_tokens", index),
        num_output_tokens=_bool(arrays, "return_num_output_tokens", index),
    )


def _lora(arrays: Arrays, index: int) -> dict[str, object]:
    task = _int(arrays, "lora_task_id", index)
    weights, config = _item(arrays, "lora_weights", index), _item(arrays, "lora_config", index)
    if (weights is None) != (config is None):
        raise ConversionError("lora_weights and lora_config must be sent together")
    if weights is not None and task is None:
        raise ConversionError("lora_task_id must be sent with lora_weights and lora_config")
    return {"lora_task_id": task, "lora_weights": weights, "lora_config": config}


def parse_request(
    arrays: Arrays, *, decoupled: bool, exclude_input_default: bool, has_lookahead_parameters: bool = False
) -> list[GenerationSpec]:
    """Every sequence the request asks for; raises ConversionError with the upstream text."""
    _refuse_unsupported(arrays, has_lookahead_parameters)
    batch = batch_size_of(arrays)
    specs: list[GenerationSpec] = []
    for index in range(batch):
        streaming = _bool(arrays, "streaming", index)
        if streaming and not decoupled:
            raise ConversionError(STREAMING_NOT_DECOUPLED)
        max_new = _int(arrays, "request_output_len", index)
        if max_new is None:
            raise ConversionError("request_output_len must be provided")
        sampling = _sampling(arrays, index)
        spec = GenerationSpec(
            prompt=_prompt(arrays, index),
            max_new_tokens=max_new,
            sampling=sampling,
            end_id=_int(arrays, "end_id", index),
            pad_id=_int(arrays, "pad_id", index),
            streaming=streaming,
            exclude_input=_bool(arrays, "exclude_input_in_output", index, exclude_input_default),
            stop_words=from_words_tensor(_item(arrays, "stop_words_list", index)),
            bad_words=from_words_tensor(_item(arrays, "bad_words_list", index)),
            embedding_bias=_embedding_bias(arrays, index),
            guide=_guide(arrays, index),
            flags=_flags(arrays, index),
            batch_index=index,
            batch_size=batch,
            num_sequences=sampling.num_return_sequences,
            **_lora(arrays, index),  # type: ignore[arg-type]
        )
        # At beam 1 each returned sequence is a sampling of its own (seed + index).
        specs.extend(replace(spec, sequence_index=s, seed_offset=s) for s in range(sampling.num_return_sequences))
    if len(specs) > 1 and not decoupled:
        raise ConversionError(BATCH_NOT_DECOUPLED)
    return specs


def cancel_target(arrays: Arrays) -> bool:
    """Whether this request is a ``stop`` (cancel the running request with the same id)."""
    return _bool(arrays, "stop", 0)
