"""A reasoning model's answer as its users' clients read it: the openai SDK (``reasoning_content``
and ``reasoning``, the Responses API's reasoning items) and LangChain, on the scripted model
served with the ``qwen3`` reasoning parser. The Vercel AI SDK's side is in ``test_vercel.py``."""

from __future__ import annotations

from langchain_openai import ChatOpenAI
from openai import OpenAI

from tests.client_lane.common import ANSWER, SCRIPTED, THOUGHT, thinking_prompt


def test_the_openai_sdk_reads_the_reasoning_apart_from_the_answer(base_url: str) -> None:
    with OpenAI(base_url=base_url, api_key="unused", max_retries=0) as sdk:
        messages = [{"role": "user", "content": thinking_prompt()}]
        whole = sdk.chat.completions.create(model=SCRIPTED, messages=messages)  # type: ignore[arg-type]
        reasoning = content = ""
        for chunk in sdk.chat.completions.create(model=SCRIPTED, messages=messages, stream=True):  # type: ignore[arg-type]
            for choice in chunk.choices:
                extra = choice.delta.model_extra or {}
                reasoning += extra.get("reasoning_content") or ""
                content += choice.delta.content or ""
        response = sdk.responses.create(model=SCRIPTED, input=thinking_prompt())
    message = whole.choices[0].message
    assert message.content == ANSWER
    assert (
        (message.model_extra or {}).get("reasoning_content") == (message.model_extra or {}).get("reasoning") == THOUGHT
    )
    assert whole.usage is not None and whole.usage.completion_tokens_details is not None
    assert whole.usage.completion_tokens_details.reasoning_tokens == 3
    assert (reasoning, content) == (THOUGHT, ANSWER)
    assert response.output_text == ANSWER
    thought = response.output[0]
    assert thought.type == "reasoning" and thought.content is not None and thought.content[0].text == THOUGHT


def test_langchain_gets_a_clean_answer_and_on_the_responses_api_the_reasoning(base_url: str) -> None:
    chat = ChatOpenAI(model=SCRIPTED, base_url=base_url, api_key="unused", max_retries=0)  # type: ignore[arg-type]
    message = chat.invoke(thinking_prompt())
    # ChatOpenAI keeps no reasoning from chat completions (it reads neither name); the answer is
    # clean, and the usage says how much was spent thinking.
    assert message.content == ANSWER
    assert message.response_metadata["token_usage"]["completion_tokens_details"]["reasoning_tokens"] == 3
    responses = ChatOpenAI(model=SCRIPTED, base_url=base_url, api_key="unused", max_retries=0, use_responses_api=True)  # type: ignore[arg-type]
    blocks = responses.invoke(thinking_prompt()).content
    assert isinstance(blocks, list)
    kinds = [block["type"] for block in blocks if isinstance(block, dict)]
    assert kinds == ["reasoning", "text"]
    reasoning, text = blocks
    assert isinstance(reasoning, dict) and reasoning["content"] == [{"type": "reasoning_text", "text": THOUGHT}]
    assert isinstance(text, dict) and text["text"] == ANSWER
