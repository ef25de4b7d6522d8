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


def token_id(name: str) -> int:
    assert name.startswith("token_id:"), name
    return int(name.removeprefix("token_id:"))


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprob_tokens_as_token_ids_name_the_tokens_of_the_answer(
    client: openai.OpenAI, tokenizer: Tokenizer, stream: bool
) -> None:
    def ask(**extra: Any) -> tuple[str, list[Any]]:
        fields: dict[str, Any] = {"max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 2}
        if not stream:
            answer = client.chat.completions.create(model=MODEL, messages=USER, extra_body=extra, **fields)  # type: ignore[arg-type]
            return answer.choices[0].message.content or "", list(answer.choices[0].logprobs.content or [])  # type: ignore[union-attr]
        chunks = client.chat.completions.create(model=MODEL, messages=USER, stream=True, extra_body=extra, **fields)  # type: ignore[arg-type]
        text, items = "", []
        for chunk in chunks:
            for choice in chunk.choices:
                text += choice.delta.content or ""
                items.extend(choice.logprobs.content or [] if choice.logprobs else [])
        return text, items

    text, plain = ask()
    same_text, named = ask(return_tokens_as_token_ids=True)
    assert same_text == text and len(named) == len(plain) == 6
    assert tokenizer.decode([token_id(item.token) for item in named]) == text
    for by_text, by_id in zip(plain, named, strict=True):
        assert (by_id.logprob, by_id.bytes) == (by_text.logprob, by_text.bytes)  # bytes: the token's text
        assert [t.logprob for t in by_id.top_logprobs] == [t.logprob for t in by_text.top_logprobs]
        for top in by_id.top_logprobs:
            assert top.bytes == list(top.token.encode()) and token_id(top.token) >= 0


def test_completion_logprob_tokens_as_token_ids_name_the_tokens_of_the_text(
    client: openai.OpenAI, tokenizer: Tokenizer
) -> None:
    answer = client.completions.create(
        model=MODEL,
        prompt="Once upon a time",
        max_tokens=6,
        temperature=0,
        logprobs=2,
        extra_body={"return_tokens_as_token_ids": True},
    )
    logprobs = answer.choices[0].logprobs
    assert logprobs is not None and logprobs.tokens and logprobs.top_logprobs and logprobs.text_offset
    assert tokenizer.decode([token_id(token) for token in logprobs.tokens]) == answer.choices[0].text
    for token, top in zip(logprobs.tokens, logprobs.top_logprobs, strict=True):
        assert token in top and all(token_id(name) >= 0 for name in top)
    lengths = [len(token) for token in logprobs.tokens[:-1]]
    assert logprobs.text_offset == [sum(lengths[:i]) for i in range(len(logprobs.tokens))]  # as vLLM counts


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
    [("truncate_prompt_tokens", 4), ("prompt_logprobs", 1), ("use_beam_search", True), ("cache_salt", "salt")],
)
def test_extras_that_cannot_be_honoured_are_a_400_naming_them(client: openai.OpenAI, field: str, value: Any) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, extra_body={field: value})
    assert caught.value.body["param"] == field  # type: ignore[index]
