"""The output tensors of one ``tensorrt_llm`` response, with the C++ backend's semantics.

Every tensor carries the batch dimension of one batch item (``[1, ...]``); beams are always 1.
``output_ids`` ``[1, 1, T]`` holds this response's tokens (while streaming: the new ones only; not
streaming: all of them, after the prompt unless the prompt is excluded) and ``sequence_length``
``[1, 1]`` their number. Optional outputs appear only when asked for (contract §2.4, §2.11, §2.13):

* ``num_input_tokens`` (the prompt length, on every response) and ``num_output_tokens`` (the ids
  in *this* response: a delta while streaming, the total otherwise, **including the echoed
  prompt**), INT32 ``[1, 1]``, each only with its ``return_num_*`` flag;
* ``cum_log_probs`` ``[1, 1]`` (the sequence so far) and ``output_log_probs`` ``[1, 1, G]`` (this
  response's generated tokens, never the prompt) with ``return_log_probs``;
* ``context_logits`` ``[1, P, V]`` on the first response and ``generation_logits``
  ``[1, 1, G, V]`` with their flags;
* ``batch_index`` when the Triton request's batch is > 1, ``sequence_index`` when more than one
  sequence was asked for;
* the perf outputs (KV-cache blocks, the four timestamps, speculative-decoding counts: always 0
  here) with ``return_perf_metrics``. Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tests.trtllm_stand_ins.kv_blocks import BlockStats
from tests.trtllm_stand_ins.request_tensors import GenerationSpec


@dataclass(frozen=True)
class PerfRecord:
    arrival_ns: int
    first_scheduled_ns: int
    first_token_ns: int
    last_token_ns: int
    blocks: BlockStats


@dataclass(frozen=True)
class ResponseContent:
    """What one response says about one sequence."""

    tokens: Sequence[int]
    """The ids of ``output_ids`` (prompt included when it is echoed)."""
    logprobs: Sequence[float] = ()
    """One per generated token in this response."""
    cumulative_logprob: float = 0.0
    context_logits: NDArray[Any] | None = None
    generation_logits: NDArray[Any] | None = None
    """``[G, V]``: this response's generated tokens."""
    perf: PerfRecord | None = None


def _scalar(value: int | float, dtype: type) -> NDArray[Any]:
    return np.array([[value]], dtype=dtype)


def trtllm_outputs(spec: GenerationSpec, content: ResponseContent) -> dict[str, NDArray[Any]]:
    tokens = np.asarray(content.tokens, dtype=np.int32).reshape(1, 1, -1)
    outputs = {"output_ids": tokens, "sequence_length": _scalar(tokens.shape[-1], np.int32)}
    flags = spec.flags
    if flags.num_input_tokens:
        outputs["num_input_tokens"] = _scalar(len(spec.prompt), np.int32)
    if flags.num_output_tokens:
        outputs["num_output_tokens"] = _scalar(tokens.shape[-1], np.int32)
    if flags.log_probs:
        outputs["cum_log_probs"] = _scalar(content.cumulative_logprob, np.float32)
        outputs["output_log_probs"] = np.asarray(content.logprobs, dtype=np.float32).reshape(1, 1, -1)
    if flags.context_logits and content.context_logits is not None:
        outputs["context_logits"] = content.context_logits.astype(np.float32)[np.newaxis]
    if flags.generation_logits and content.generation_logits is not None:
        outputs["generation_logits"] = content.generation_logits.astype(np.float32)[np.newaxis, np.newaxis]
    if spec.batch_size > 1:
        outputs["batch_index"] = _scalar(spec.batch_index, np.int32)
    if spec.num_sequences > 1:
        outputs["sequence_index"] = _scalar(spec.sequence_index, np.int32)
    if flags.perf_metrics and content.perf is not None:
        outputs.update(perf_outputs(content.perf))
    return outputs


def perf_outputs(perf: PerfRecord) -> dict[str, NDArray[Any]]:
    return {
        "kv_cache_alloc_new_blocks": _scalar(perf.blocks.new, np.int32),
        "kv_cache_reused_blocks": _scalar(perf.blocks.reused, np.int32),
        "kv_cache_alloc_total_blocks": _scalar(perf.blocks.total, np.int32),
        "arrival_time_ns": _scalar(perf.arrival_ns, np.int64),
        "first_scheduled_time_ns": _scalar(perf.first_scheduled_ns, np.int64),
        "first_token_time_ns": _scalar(perf.first_token_ns, np.int64),
        "last_token_time_ns": _scalar(perf.last_token_ns, np.int64),
        "acceptance_rate": _scalar(0.0, np.float32),
        "total_accepted_draft_tokens": _scalar(0, np.int32),
        "total_draft_tokens": _scalar(0, np.int32),
    }


def chunk_sizes(knob: str) -> tuple[int, ...]:
    """``stand_in_tokens_per_response`` ("1,3,2") → the cycle of tokens per streamed response."""
    try:
        sizes = tuple(int(part) for part in knob.split(",") if part.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise ValueError(f"stand_in_tokens_per_response must be a comma-separated list of integers >= 1, got {knob!r}")
    return sizes
