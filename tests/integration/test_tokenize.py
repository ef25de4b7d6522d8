"""Counting before sending, end to end: /tokenize, /detokenize and /v1/responses/input_tokens
against real Triton, each count compared with the ``usage`` the same request reports when it is
sent (tiny-llm counts its prompt itself, with its own tokenizer, and reports it)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.integration.conftest import MODEL, GatewayProcess

CONTEXT = 131072
"""tiny-llm's ``max_model_len`` (triton_models/reference/tiny-llm/1/model.json)."""

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
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You answer in one word."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    {"role": "user", "content": "And tomorrow? " * 100},
]
CHATS = {
    "one turn": {"messages": [{"role": "user", "content": "hello"}]},
    "tools": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
    "multi-turn with tool results": {"messages": CONVERSATION, "tools": TOOLS},
    "tools, choice none": {"messages": CONVERSATION, "tools": TOOLS, "tool_choice": "none"},
}


@pytest.fixture(scope="module")
def http(gateway: GatewayProcess) -> Any:
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        yield client


@pytest.mark.parametrize("chat", CHATS.values(), ids=CHATS.keys())
def test_tokenize_count_equals_the_chat_requests_prompt_tokens(
    http: httpx.Client, client: openai.OpenAI, chat: dict[str, Any]
) -> None:
    counted = http.post("/tokenize", json={"model": MODEL, **chat}).json()
    assert counted["count"] == len(counted["tokens"])
    assert counted["max_model_len"] == CONTEXT
    # max_tokens given and the prompt well within the context: the gateway does not count, the
    # usage is the model's own count of the prompt it received.
    sent = client.chat.completions.create(model=MODEL, max_tokens=1, **chat)
    assert sent.usage is not None
    assert counted["count"] == sent.usage.prompt_tokens


def test_tokenize_count_equals_the_completions_prompt_tokens(http: httpx.Client, client: openai.OpenAI) -> None:
    prompt = "Once upon a time, " * 20
    counted = http.post("/tokenize", json={"model": MODEL, "prompt": prompt, "return_token_strs": True}).json()
    sent = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1)
    assert sent.usage is not None
    assert counted["count"] == sent.usage.prompt_tokens
    assert len(counted["token_strs"]) == counted["count"]
    back = http.post("/detokenize", json={"model": MODEL, "tokens": counted["tokens"]}).json()
    assert back == {"prompt": prompt}


def test_a_chat_over_the_context_is_counted_and_its_refusal_says_the_same_number(
    http: httpx.Client, client: openai.OpenAI
) -> None:
    messages = [{"role": "user", "content": "word " * CONTEXT}]  # a token a word at least
    counted = http.post("/tokenize", json={"model": MODEL, "messages": messages}).json()
    assert counted["count"] > counted["max_model_len"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    assert f"{counted['count']} in the messages" in refused.value.message


def test_input_tokens_equal_the_responses_input_tokens(client: openai.OpenAI) -> None:
    tools: Any = [{"type": "function", **TOOLS[0]["function"]}]
    fields: dict[str, Any] = {"model": MODEL, "instructions": "Be brief.", "input": "Weather in Paris?", "tools": tools}
    counted = client.responses.input_tokens.count(**fields)
    assert counted.object == "response.input_tokens"
    first = client.responses.create(max_output_tokens=16, **fields)
    assert first.usage is not None
    assert counted.input_tokens == first.usage.input_tokens
    # A continued conversation counts the stored turns too (instructions and tools are not carried over).
    follow: dict[str, Any] = {"model": MODEL, "input": "And tomorrow?", "previous_response_id": first.id}
    counted_next = client.responses.input_tokens.count(**follow)
    second = client.responses.create(max_output_tokens=16, **follow)
    assert second.usage is not None
    assert counted_next.input_tokens == second.usage.input_tokens
    alone = client.responses.input_tokens.count(model=MODEL, input="And tomorrow?")
    assert counted_next.input_tokens > alone.input_tokens


def test_refusals_are_openai_shaped_and_name_the_field(http: httpx.Client, client: openai.OpenAI) -> None:
    unknown = http.post("/tokenize", json={"model": "no-such-model", "prompt": "hi"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["param"] == "model"
    out_of_vocab = http.post("/detokenize", json={"model": MODEL, "tokens": [1, 10**9]})
    assert out_of_vocab.status_code == 400
    assert out_of_vocab.json()["error"]["param"] == "tokens.1"
    bad_body = http.post("/tokenize", json={"model": MODEL, "messages": "hello"})
    assert bad_body.status_code == 400
    assert bad_body.json()["error"]["param"] == "messages"
    with pytest.raises(openai.NotFoundError):
        client.responses.input_tokens.count(model="no-such-model", input="hi")
