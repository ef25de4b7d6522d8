"""vLLM's request extras: each honoured or refused by name (``gateway/plan/extras.py``), never dropped."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequestError
from gateway.models.catalog import ServedModel
from gateway.models.resolve import ResolvedModel
from gateway.models.templates import ChatTemplate
from gateway.plan.chat import render_chat_prompt
from gateway.plan.extras import check_extras
from gateway.plan.requests import ChatCompletionRequest, CompletionRequest

MESSAGES = [{"role": "user", "content": "Hi"}]
TEMPLATE = ChatTemplate(
    "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}"
    "{% if documents %}{% for d in documents %}[doc {{ d['title'] }}: {{ d['text'] }}]{% endfor %}{% endif %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}",
    {"bos_token": "<s>"},
)
MODEL = ResolvedModel(ServedModel(name="m", template=TEMPLATE), None)


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": MESSAGES, **fields})


def completion(**fields: Any) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "prompt": "Hi", **fields})


def refusal(body: ChatCompletionRequest | CompletionRequest) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        check_extras(body)
    return caught.value


REFUSED = [
    ("use_beam_search", True),
    ("truncate_prompt_tokens", 8),
    ("prompt_logprobs", 1),
    ("logprob_token_ids", [1]),
    ("return_token_ids", True),
    ("add_special_tokens", False),
    ("cache_salt", "salt"),
    ("kv_transfer_params", {"do_remote_prefill": True}),
    ("ec_transfer_params", {"x": 1}),
    ("repetition_detection", {"max_pattern_size": 4}),
    ("thinking_token_budget", 64),
    ("watermarking", True),
    ("stream_interval", 4),
]


@pytest.mark.parametrize(("field", "value"), REFUSED)
@pytest.mark.parametrize("make", [chat, completion])
def test_extras_that_cannot_be_honoured_are_refused_by_name(make: Any, field: str, value: Any) -> None:
    assert refusal(make(**{field: value})).param == field


@pytest.mark.parametrize(
    "fields",
    [
        {"use_beam_search": False, "priority": 0, "watermarking": False, "return_token_ids": False},
        {"length_penalty": 1.0, "truncation_side": "left", "request_id": "abc", "session_id": "s"},
        {"return_tokens_as_token_ids": True},  # no logprobs asked: nothing to change
        {"return_tokens_as_token_ids": True, "logprobs": 1},  # honoured: tokens named token_id:<id>
        {"kv_transfer_params": None, "prompt_logprobs": None},
    ],
)
def test_extras_at_a_value_that_changes_nothing_pass(fields: dict[str, Any]) -> None:
    check_extras(chat(**fields))
    check_extras(completion(**fields))


def test_prompt_embeds_are_refused() -> None:
    assert refusal(completion(prompt_embeds="AAAA")).param == "prompt_embeds"


def test_continue_final_message_with_a_generation_prompt_is_refused() -> None:
    error = refusal(chat(continue_final_message=True))
    assert error.param == "continue_final_message"
    check_extras(chat(continue_final_message=True, add_generation_prompt=False))


# -- template extras -----------------------------------------------------------------------------


def test_continue_final_message_leaves_the_last_message_open() -> None:
    body = chat(
        messages=[*MESSAGES, {"role": "assistant", "content": "The answer is"}],
        continue_final_message=True,
        add_generation_prompt=False,
    )
    assert render_chat_prompt(body, MODEL) == "<s><user>Hi</user>\n<assistant>The answer is"


def test_continue_final_message_trimmed_by_the_template_is_cut_at_its_text() -> None:
    trimming = ChatTemplate("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] | trim }}<eot>{% endfor %}")
    rendered = trimming.render(
        [{"role": "assistant", "content": "Once upon "}], add_generation_prompt=False, continue_final_message=True
    )
    assert rendered == "[assistant] Once upon"


def test_continue_final_message_the_template_drops_is_a_400() -> None:
    dropping = ChatTemplate(
        "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
    )
    with pytest.raises(InvalidRequestError) as caught:
        dropping.render([{"role": "assistant", "content": "x"}], continue_final_message=True)
    assert caught.value.param == "continue_final_message"


def test_documents_reach_the_template() -> None:
    body = chat(documents=[{"title": "T", "text": "body"}])
    assert render_chat_prompt(body, MODEL) == "<s><user>Hi</user>\n[doc T: body]<assistant>"


def test_a_request_chat_template_is_refused_unless_allowed() -> None:
    body = chat(chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}!")
    with pytest.raises(InvalidRequestError) as caught:
        render_chat_prompt(body, MODEL)
    assert caught.value.param == "chat_template"
    assert render_chat_prompt(body, MODEL, allow_request_template=True) == "Hi!"


def test_a_request_chat_template_sees_the_models_special_tokens() -> None:
    body = chat(chat_template="{{ bos_token }}{{ messages[0]['content'] }}")
    assert render_chat_prompt(body, MODEL, allow_request_template=True) == "<s>Hi"
    bare = ResolvedModel(ServedModel(name="m"), None)
    assert render_chat_prompt(body, bare, allow_request_template=True) == "Hi"


def test_a_request_chat_template_that_does_not_compile_is_a_400_naming_it() -> None:
    body = chat(chat_template="{% for %}")
    with pytest.raises(InvalidRequestError) as caught:
        render_chat_prompt(body, MODEL, allow_request_template=True)
    assert caught.value.param == "chat_template"
