"""A reasoning model's answer as its users' clients read it: the openai SDK (``reasoning_content``
and ``reasoning``, the Responses API's reasoning items) and LangChain, on the scripted model
served with each reasoning parser (``deepseek_v3``'s with thinking turned on by
``chat_template_kwargs``, and on Chat Completions only: the Responses API carries no template
variables). The Vercel AI SDK's side is in ``test_vercel.py``."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_openai import ChatOpenAI
from openai import OpenAI

from tests.client_lane.common import (
    ANSWER,
    REASONING_OUTPUTS,
    THINKING_SWITCHES,
    THOUGHT,
    reasoning_model,
    reasoning_tokens,
    thinking_prompt,
)

PARSERS = sorted(REASONING_OUTPUTS)


def _switch(parser: str) -> dict[str, Any] | None:
    """The body's extra fields that turn the model's thinking on, as users send them."""
    kwargs = THINKING_SWITCHES.get(parser)
    return {"chat_template_kwargs": kwargs} if kwargs else None


@pytest.mark.parametrize("parser", PARSERS)
def test_the_openai_sdk_reads_the_reasoning_apart_from_the_answer(base_url: str, parser: str) -> None:
    model, extra = reasoning_model(parser), _switch(parser)
    with OpenAI(base_url=base_url, api_key="unused", max_retries=0) as sdk:
        messages = [{"role": "user", "content": thinking_prompt(parser)}]
        whole = sdk.chat.completions.create(model=model, messages=messages, extra_body=extra)  # type: ignore[arg-type]
        reasoning = content = ""
        for chunk in sdk.chat.completions.create(model=model, messages=messages, stream=True, extra_body=extra):  # type: ignore[arg-type]
            for choice in chunk.choices:
                delta = choice.delta.model_extra or {}
                reasoning += delta.get("reasoning_content") or ""
                content += choice.delta.content or ""
        response = None if extra else sdk.responses.create(model=model, input=thinking_prompt(parser))
    message = whole.choices[0].message
    assert message.content == ANSWER
    assert (
        (message.model_extra or {}).get("reasoning_content") == (message.model_extra or {}).get("reasoning") == THOUGHT
    )
    assert whole.usage is not None and whole.usage.completion_tokens_details is not None
    assert whole.usage.completion_tokens_details.reasoning_tokens == reasoning_tokens(parser)
    assert (reasoning, content) == (THOUGHT, ANSWER)
    if response is not None:
        assert response.output_text == ANSWER
        thought = response.output[0]
        assert thought.type == "reasoning" and thought.content is not None and thought.content[0].text == THOUGHT


@pytest.mark.parametrize("parser", PARSERS)
def test_langchain_gets_a_clean_answer_and_on_the_responses_api_the_reasoning(base_url: str, parser: str) -> None:
    model, extra = reasoning_model(parser), _switch(parser)
    chat = ChatOpenAI(model=model, base_url=base_url, api_key="unused", max_retries=0, extra_body=extra)  # type: ignore[arg-type]
    message = chat.invoke(thinking_prompt(parser))
    # ChatOpenAI keeps no reasoning from chat completions (it reads neither name); the answer is
    # clean, and the usage says how much was spent thinking.
    assert message.content == ANSWER
    details = message.response_metadata["token_usage"]["completion_tokens_details"]
    assert details["reasoning_tokens"] == reasoning_tokens(parser)
    if extra:
        return
    responses = ChatOpenAI(model=model, base_url=base_url, api_key="unused", max_retries=0, use_responses_api=True)  # type: ignore[arg-type]
    blocks = responses.invoke(thinking_prompt(parser)).content
    assert isinstance(blocks, list)
    kinds = [block["type"] for block in blocks if isinstance(block, dict)]
    assert kinds == ["reasoning", "text"]
    reasoning, text = blocks
    assert isinstance(reasoning, dict) and reasoning["content"] == [{"type": "reasoning_text", "text": THOUGHT}]
    assert isinstance(text, dict) and text["text"] == ANSWER
