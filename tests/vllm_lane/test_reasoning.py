"""Reasoning and the derived context length, against vLLM's own server.

``tiny-think`` (``tests/vllm_lane/thinking.py``) writes ``reasoning</think>hello world`` after its
Qwen3.5-style generation prompt (``<think>\\n``), and ``hello world`` after the closed block that
``enable_thinking: false`` writes. The gateway serves it through the lane's Triton with the
reasoning parser it detects from the template (``qwen3``) and decides from the rendered prompt
where the output starts; vLLM's server runs it with ``--reasoning-parser qwen3``. The split must
be the same, streamed and not. Neither side is told ``max_model_len``: both derive it from the
weights' ``config.json`` (2048 positions × linear RoPE factor 2).
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.vllm_lane import lane as processes
from tests.vllm_lane.compare import messages
from tests.vllm_lane.conftest import LaneUrls
from tests.vllm_lane.thinking import ANSWER, DERIVED_MAX_MODEL_LEN, REASONING, THINK_MODEL

GREEDY: dict[str, Any] = {"temperature": 0, "max_tokens": 32}
OFF = {"chat_template_kwargs": {"enable_thinking": False}}


def split(client: openai.OpenAI, **kwargs: Any) -> tuple[str | None, str | None, str | None, Any]:
    """(reasoning, content, finish reason, usage) of one whole answer. vLLM 0.32 names the
    reasoning ``reasoning``; the gateway sends it under that name and ``reasoning_content``."""
    response = client.chat.completions.create(model=THINK_MODEL, messages=messages("Why?"), **GREEDY, **kwargs)
    choice = response.choices[0]
    extra = choice.message.model_extra or {}
    usage = response.usage
    counts = None if usage is None else (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)
    return extra.get("reasoning"), choice.message.content, choice.finish_reason, counts


def split_streamed(client: openai.OpenAI, **kwargs: Any) -> tuple[str, str, str | None, Any]:
    """The same, folded from the stream: each delta's reasoning and content concatenated."""
    stream = client.chat.completions.create(
        model=THINK_MODEL,
        messages=messages("Why?"),
        stream=True,
        stream_options={"include_usage": True},
        **GREEDY,
        **kwargs,
    )
    reasoning = content = ""
    finish = counts = None
    for chunk in stream:
        if chunk.usage is not None:
            counts = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens, chunk.usage.total_tokens)
        for choice in chunk.choices:
            reasoning += (choice.delta.model_extra or {}).get("reasoning") or ""
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return reasoning, content, finish, counts


def test_the_thinking_answer_splits_as_vllm_splits_it(gw: openai.OpenAI, vt: openai.OpenAI) -> None:
    ours, theirs = split(gw), split(vt)
    assert ours == theirs
    assert ours[:3] == (REASONING, ANSWER, "stop")


def test_the_thinking_stream_splits_as_vllm_splits_it(gw: openai.OpenAI, vt: openai.OpenAI) -> None:
    ours, theirs = split_streamed(gw), split_streamed(vt)
    assert ours == theirs
    assert ours[:3] == (REASONING, ANSWER, "stop")


def test_thinking_off_is_all_answer_as_on_vllm(gw: openai.OpenAI, vt: openai.OpenAI) -> None:
    """``enable_thinking: false``: the template closes the block in the prompt; vLLM's parser
    reads the switch, the gateway the prompt, and both answer without reasoning."""
    ours, theirs = split(gw, extra_body=OFF), split(vt, extra_body=OFF)
    assert ours == theirs
    assert ours[:3] == (None, ANSWER, "stop")
    streamed, streamed_vllm = split_streamed(gw, extra_body=OFF), split_streamed(vt, extra_body=OFF)
    assert streamed == streamed_vllm
    assert streamed[:3] == ("", ANSWER, "stop")


def test_include_reasoning_false_drops_it_on_both(gw: openai.OpenAI, vt: openai.OpenAI) -> None:
    body = {"include_reasoning": False}
    ours, theirs = split(gw, extra_body=body), split(vt, extra_body=body)
    assert ours == theirs
    assert ours[:2] == (None, ANSWER)


@pytest.mark.parametrize(
    ("model", "expected"), [(THINK_MODEL, DERIVED_MAX_MODEL_LEN), (processes.MODEL, processes.MAX_MODEL_LEN)]
)
def test_models_say_the_context_length_vllm_runs_with(lane: LaneUrls, model: str, expected: int) -> None:
    """tiny-think's model.json sets no max_model_len (derived on both sides); tiny-llm's sets 2048."""
    vllm_url = lane.vllm_thinking if model == THINK_MODEL else lane.vllm
    if not vllm_url:
        pytest.skip("no thinking server (set VLLM_LANE_THINKING_URL beside the other two)")
    ours = {m["id"]: m for m in httpx.get(lane.gateway + "/v1/models", timeout=10).json()["data"]}
    theirs = {m["id"]: m for m in httpx.get(vllm_url + "/v1/models", timeout=10).json()["data"]}
    assert ours[model]["max_model_len"] == theirs[model]["max_model_len"] == expected
    tokenized = httpx.post(lane.gateway + "/tokenize", json={"model": model, "prompt": "hi"}, timeout=10).json()
    assert tokenized["max_model_len"] == expected
