"""/tokenize and /detokenize answer as vLLM's own server does, and the gateway's count is the
usage Triton's vLLM backend reports for the same chat or completions request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest

from tests.vllm_lane.compare import messages

if TYPE_CHECKING:
    from tests.vllm_lane.conftest import LaneUrls

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
TURNS: list[dict[str, Any]] = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "Sunny."},
    {"role": "user", "content": "And tomorrow?"},
]
BODIES = {
    "prompt": {"prompt": "Once upon a time"},
    "prompt without special tokens": {"prompt": "Once upon a time", "add_special_tokens": False},
    "prompt with token strings": {"prompt": "héllo wörld", "return_token_strs": True},
    "messages": {"messages": messages("Hello there")},
    "messages, multi-turn": {"messages": TURNS},
    "messages with special tokens": {"messages": TURNS, "add_special_tokens": True},
    "messages with tools": {"messages": messages("Weather in Paris?"), "tools": TOOLS},
    "messages, no generation prompt": {"messages": TURNS, "add_generation_prompt": False},
    "messages, final message continued": {
        "messages": [*TURNS, {"role": "assistant", "content": "Rain"}],
        "add_generation_prompt": False,
        "continue_final_message": True,
    },
}


def post(base: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(base + path, json={"model": "tiny-llm", **body}, timeout=60)


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_tokenize_matches_vllm(lane: LaneUrls, body: dict[str, Any]) -> None:
    ours, theirs = post(lane.gateway, "/tokenize", body), post(lane.vllm, "/tokenize", body)
    assert ours.status_code == theirs.status_code == 200, (ours.text, theirs.text)
    assert ours.json() == theirs.json()


def test_detokenize_matches_vllm(lane: LaneUrls) -> None:
    tokens = post(lane.vllm, "/tokenize", {"messages": TURNS}).json()["tokens"]
    ours, theirs = (
        post(lane.gateway, "/detokenize", {"tokens": tokens}),
        post(lane.vllm, "/detokenize", {"tokens": tokens}),
    )
    assert ours.json() == theirs.json()


def test_the_count_is_the_usage_through_the_vllm_backend(lane: LaneUrls, gw: openai.OpenAI) -> None:
    counted = post(lane.gateway, "/tokenize", {"messages": TURNS, "tools": TOOLS}).json()["count"]
    sent = gw.chat.completions.create(model="tiny-llm", messages=TURNS, tools=TOOLS, max_tokens=1)  # type: ignore[arg-type]
    assert sent.usage is not None and sent.usage.prompt_tokens == counted
    prompt = post(lane.gateway, "/tokenize", {"prompt": "Once upon a time"}).json()["count"]
    completion = gw.completions.create(model="tiny-llm", prompt="Once upon a time", max_tokens=1)
    assert completion.usage is not None and completion.usage.prompt_tokens == prompt


def test_ids_out_of_vocabulary_are_a_400_where_vllm_drops_them(lane: LaneUrls) -> None:
    """Deliberately different: vLLM's server decodes the ids it knows and drops the others without
    a word, which hides a client's bug (ids of another model's vocabulary); the gateway names the id."""
    ours, theirs = (
        post(lane.gateway, "/detokenize", {"tokens": [1, 10**6]}),
        post(lane.vllm, "/detokenize", {"tokens": [1, 10**6]}),
    )
    assert ours.status_code == 400
    assert ours.json()["error"]["param"] == "tokens.1"
    assert theirs.status_code == 200
    assert theirs.json() == post(lane.vllm, "/detokenize", {"tokens": [1]}).json()


def test_unknown_model_is_404_on_both(lane: LaneUrls) -> None:
    for base in (lane.gateway, lane.vllm):
        answer = httpx.post(base + "/tokenize", json={"model": "no-such-model", "prompt": "hi"}, timeout=60)
        assert answer.status_code == 404, (base, answer.text)
