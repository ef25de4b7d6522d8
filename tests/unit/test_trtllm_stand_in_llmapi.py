"""The LLM-API model's rules (tests/trtllm_stand_ins/llmapi.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.trtllm_stand_ins.llmapi import (
    DEFAULT_MAX_TOKENS,
    LORA_ALL_OR_NONE,
    CompletionState,
    LlmApiError,
    engine_inputs,
    error_outputs,
    llmapi_outputs,
    parse_llmapi_request,
    perf_strings,
)

ROOT = Path(__file__).resolve().parents[2]


def text(value: str) -> np.ndarray:
    return np.array([value.encode()], dtype=object)


def test_defaults_follow_the_llm_api() -> None:
    request = parse_llmapi_request({"text_input": text("hi")})
    assert request.max_tokens == DEFAULT_MAX_TOKENS == 32
    assert not request.streaming and not request.exclude_input and not request.return_finish_reason


def test_a_two_dimensional_text_input_is_refused_with_the_models_prefix() -> None:
    with pytest.raises(LlmApiError) as refused:
        parse_llmapi_request({"text_input": np.array([[b"hi"]], dtype=object)})
    assert refused.value.message.startswith("Error generating request: text_input must be a 1-D tensor")
    assert error_outputs()["text_output"].tolist() == [b"N/A"]


def test_lora_needs_id_name_and_path_together_and_an_existing_path() -> None:
    with pytest.raises(LlmApiError) as refused:
        parse_llmapi_request({"text_input": text("hi"), "lora_id": np.array([1], np.uint64)})
    assert str(refused.value) == LORA_ALL_OR_NONE
    adapter = ROOT / "triton_models" / "weights" / "lora" / "alpha"
    lora = {"lora_id": np.array([3], np.uint64), "lora_name": text("alpha"), "lora_path": text(str(adapter))}
    assert parse_llmapi_request({"text_input": text("hi"), **lora}).lora is not None
    with pytest.raises(LlmApiError, match="does not exist"):
        parse_llmapi_request({"text_input": text("hi"), **lora, "lora_path": text("/nowhere")})
    with pytest.raises(LlmApiError, match="'hf' or 'nemo'"):
        parse_llmapi_request({"text_input": text("hi"), **lora, "lora_ckpt_source": text("gguf")})


def test_the_engine_request_streams_and_excludes_the_prompt() -> None:
    request = parse_llmapi_request({"text_input": text("hi"), "sampling_param_top_k": np.array([4], np.int32)})
    inputs = engine_inputs(request, [1, 9], end_id=2, pad_id=0)
    assert inputs["streaming"].tolist() == [[True]] and inputs["exclude_input_in_output"].tolist() == [[True]]
    assert inputs["runtime_top_k"].tolist() == [[4]] and "temperature" not in inputs


def test_text_is_cumulative_cut_before_a_stop_string_with_its_reasons() -> None:
    request = parse_llmapi_request(
        {
            "text_input": text("Q: "),
            "sampling_param_stop": np.array([b"END"], object),
            "return_finish_reason": np.array([True]),
            "return_stop_reason": np.array([True]),
        }
    )
    state = CompletionState(request, [])
    decode = {1: "ab", 2: "abcE", 3: "abcEND!"}
    assert not state.add([7], lambda ids: decode[len(ids)])
    assert llmapi_outputs(state)["finish_reason"].tolist() == [b"None"]
    assert not state.add([8], lambda ids: decode[len(ids)])
    assert state.add([9], lambda ids: decode[len(ids)])
    outputs = llmapi_outputs(state)
    assert outputs["text_output"].tolist() == [b"Q: abc"]  # the prompt first: not streaming, not excluded
    assert outputs["finish_reason"].tolist() == [b"stop"] and outputs["stop_reason"].tolist() == [b"END"]


def test_the_end_is_length_at_the_budget_else_stop() -> None:
    request = parse_llmapi_request({"text_input": text("x"), "sampling_param_max_tokens": np.array([2], np.int32)})
    at_budget = CompletionState(request, [5, 6])
    at_budget.end()
    early = CompletionState(request, [5])
    early.end()
    assert (at_budget.finish_reason, early.finish_reason) == ("length", "stop")


def test_logprob_and_perf_outputs_are_strings_as_upstream_sends_them() -> None:
    request = parse_llmapi_request(
        {
            "text_input": text("x"),
            "return_cumulative_logprob": np.array([True]),
            "sampling_param_return_perf_metrics": np.array([True]),
        }
    )
    state = CompletionState(request, [], cumulative_logprob=-1.5)
    perf = {
        "kv_cache_reused_blocks": np.array([[1]], np.int32),
        "kv_cache_alloc_total_blocks": np.array([[4]], np.int32),
    }
    outputs = llmapi_outputs(state, perf)
    assert outputs["cumulative_logprob"].dtype == object and outputs["cumulative_logprob"].tolist() == [b"-1.5"]
    assert perf_strings(perf)["kv_cache_hit_rate"].tolist() == [b"0.25"]
    assert outputs["kv_cache_missed_block"].tolist() == [b"3"]
