"""vLLM's request extras through a real Triton, as clients send them (the openai SDK's
``extra_body``): the sampling ones tiny-llm honours, the template ones, and refusals by name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tokenizers import Tokenizer

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import MODEL, GatewayProcess, start_gateway, stop_gateway

ECHO = json.dumps({"echo_inputs": True})
WEIGHTS = Path(__file__).resolve().parents[2] / "triton_models" / "weights" / "tiny-llm"
USER = [{"role": "user", "content": "Tell me a story"}]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(WEIGHTS / "tokenizer.json"))


@pytest.fixture(scope="module")
def template_gateway(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A gateway that lets requests bring their own chat template."""
    where = tmp_path_factory.mktemp("request-template")
    process = start_gateway(triton.grpc_url, where / "gateway.log", env={"GATEWAY_ALLOW_REQUEST_CHAT_TEMPLATE": "true"})
    yield process
    stop_gateway(process)


def echoed(gateway: GatewayProcess, **fields: Any) -> dict[str, Any]:
    """What the scripted model received for a chat request (it answers with its inputs)."""
    body = {"model": "scripted", "messages": [{"role": "user", "content": ECHO}], "max_tokens": 5, **fields}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return dict(json.loads(response.json()["choices"][0]["message"]["content"]))


def test_token_extras_reach_the_sampling_parameters(gateway: GatewayProcess) -> None:
    fields = {"bad_words": ["x"], "allowed_token_ids": [5, 6], "spaces_between_special_tokens": False}
    params = echoed(gateway, **fields)["sampling_parameters"]
    assert {key: params[key] for key in fields} == fields


def test_allowed_token_ids_are_all_tiny_llm_may_say(client: openai.OpenAI, tokenizer: Tokenizer) -> None:
    token = tokenizer.encode("hello", add_special_tokens=False).ids[0]
    answer = client.chat.completions.create(
        model=MODEL,
        messages=USER,  # type: ignore[arg-type]
        max_tokens=4,
        seed=3,
        extra_body={"allowed_token_ids": [token], "ignore_eos": True},
    )
    assert answer.choices[0].message.content == tokenizer.decode([token] * 4)


def test_bad_words_keep_tiny_llms_greedy_words_out(client: openai.OpenAI, tokenizer: Tokenizer) -> None:
    def say(**extra: Any) -> str:
        answer = client.completions.create(
            model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0, extra_body=extra
        )
        return answer.choices[0].text

    free = say()
    word = tokenizer.decode(tokenizer.encode(free, add_special_tokens=False).ids[:1])
    assert word.strip()
    kept_out = say(bad_words=[word])
    assert kept_out != free
    assert not kept_out.startswith(word)


def test_continue_final_message_leaves_the_answer_open(gateway: GatewayProcess) -> None:
    messages = [{"role": "user", "content": ECHO}, {"role": "assistant", "content": "Sure, here"}]
    prompt = echoed(gateway, messages=messages, continue_final_message=True, add_generation_prompt=False)["text_input"]
    assert prompt == f"<|im_start|>user\n{ECHO}<|im_end|>\n<|im_start|>assistant\nSure, here"


def test_continue_final_message_on_tiny_llm_with_echo_starts_with_the_prefill(client: openai.OpenAI) -> None:
    messages = [*USER, {"role": "assistant", "content": "Once upon a time"}]
    body = {"continue_final_message": True, "add_generation_prompt": False, "echo": True}
    answer = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=4,
        temperature=0,
        extra_body=body,  # type: ignore[arg-type]
    )
    text = answer.choices[0].message.content or ""
    assert text.startswith("Once upon a time") and len(text) > len("Once upon a time")
    streamed = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=4,
        temperature=0,
        stream=True,
        extra_body=body,  # type: ignore[arg-type]
    )
    assert "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices) == text


def test_continue_final_message_with_a_generation_prompt_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=USER,
            max_tokens=2,
            extra_body={"continue_final_message": True},  # type: ignore[arg-type]
        )
    assert caught.value.body["param"] == "continue_final_message"  # type: ignore[index]


TEMPLATE = "{% for d in documents or [] %}[{{ d['title'] }}] {{ d['text'] }}\n{% endfor %}{{ messages[-1]['content'] }}"


def test_a_request_chat_template_is_refused_where_not_allowed(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=USER,
            max_tokens=2,
            extra_body={"chat_template": TEMPLATE},  # type: ignore[arg-type]
        )
    assert caught.value.body["param"] == "chat_template"  # type: ignore[index]


def test_a_request_chat_template_renders_the_documents_where_allowed(template_gateway: GatewayProcess) -> None:
    documents = [{"title": "A", "text": "first"}, {"title": "B", "text": "second"}]
    prompt = echoed(template_gateway, chat_template=TEMPLATE, documents=documents)["text_input"]
    assert prompt == f"[A] first\n[B] second\n{ECHO}"
    assert echoed(template_gateway)["text_input"].startswith("<|im_start|>user")  # the model's own otherwise


@pytest.mark.parametrize(
    ("field", "value"),
    [("truncate_prompt_tokens", 4), ("prompt_logprobs", 1), ("use_beam_search", True), ("priority", 2)],
)
def test_extras_that_cannot_be_honoured_are_a_400_naming_them(client: openai.OpenAI, field: str, value: Any) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, extra_body={field: value})
    assert caught.value.body["param"] == field  # type: ignore[index]
