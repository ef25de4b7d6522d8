"""JSON null on request fields: the field's default for optional fields, "missing" for required
ones, and an OpenAPI document that says so."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from gateway.plan.nullable import or_null
from gateway.plan.requests import ChatCompletionRequest, CompletionRequest, StreamOptions

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {"model": "m", "prompt": "hi"}


def optional(model: type[BaseModel]) -> list[str]:
    return [name for name, field in model.model_fields.items() if not field.is_required()]


def default_of(model: type[BaseModel], name: str) -> Any:
    return model.model_fields[name].get_default(call_default_factory=True)


@pytest.mark.parametrize("name", optional(ChatCompletionRequest))
def test_every_optional_chat_field_takes_null_as_its_default(name: str) -> None:
    body = ChatCompletionRequest.model_validate({**CHAT, name: None})
    assert getattr(body, name) == default_of(ChatCompletionRequest, name)


@pytest.mark.parametrize("name", optional(CompletionRequest))
def test_every_optional_completion_field_takes_null_as_its_default(name: str) -> None:
    body = CompletionRequest.model_validate({**COMPLETION, name: None})
    assert getattr(body, name) == default_of(CompletionRequest, name)


def test_the_fields_clients_send_as_null_are_declared_optional() -> None:
    # The fields clients send as null (OpenAI's nullable ones): a rename or a new required field
    # would drop them from the parametrized tests above without failing them.
    both = {"n", "stream", "stop", "seed", "stream_options", "include_stop_str_in_output", "temperature", "top_p"}
    both |= {"max_tokens", "presence_penalty", "frequency_penalty", "logit_bias", "user"}
    chat = {"logprobs", "top_logprobs", "max_completion_tokens", "response_format", "tools", "tool_choice"}
    chat |= {"parallel_tool_calls", "add_generation_prompt"}
    assert both | chat <= set(optional(ChatCompletionRequest))
    assert both | {"logprobs", "echo", "suffix", "best_of"} <= set(optional(CompletionRequest))


def test_nulls_everywhere_give_the_plain_defaults() -> None:
    nulls = {name: None for name in ("n", "stream", "logprobs", "include_stop_str_in_output", "add_generation_prompt")}
    body = ChatCompletionRequest.model_validate({**CHAT, **nulls, "stream_options": {"include_usage": None}})
    assert (body.n, body.stream, body.logprobs, body.include_stop_str_in_output) == (1, False, False, False)
    assert body.add_generation_prompt is True
    assert body.stream_options == StreamOptions(include_usage=False, continuous_usage_stats=False)
    legacy = CompletionRequest.model_validate({**COMPLETION, "echo": None, "logprobs": None, "n": None})
    assert (legacy.echo, legacy.logprobs, legacy.n) == (False, None, 1)


@pytest.mark.parametrize(
    ("model", "body", "name"), [(CompletionRequest, COMPLETION, "prompt"), (ChatCompletionRequest, CHAT, "model")]
)
def test_a_required_field_sent_as_null_is_missing(model: type[BaseModel], body: dict[str, Any], name: str) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate({**body, name: None})
    assert [(e["type"], e["loc"]) for e in info.value.errors()] == [("missing", (name,))]


def test_unknown_fields_keep_their_null() -> None:
    assert ChatCompletionRequest.model_validate({**CHAT, "new_field": None}).model_extra == {"new_field": None}


def test_values_other_than_null_are_still_validated() -> None:
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate({**CHAT, "n": "many"})


def test_the_schema_adds_null_to_fields_with_a_default_and_nowhere_else() -> None:
    properties = ChatCompletionRequest.model_json_schema()["properties"]
    assert properties["n"] == {
        "anyOf": [{"type": "integer", "minimum": 1, "maximum": 128}, {"type": "null"}],
        "default": 1,
        "title": "N",
    }
    assert properties["stream"]["anyOf"] == [{"type": "boolean"}, {"type": "null"}]
    assert properties["max_tokens"]["anyOf"] == [  # untouched
        {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
        {"type": "null"},
    ]
    assert properties["model"] == {"type": "string", "minLength": 1, "title": "Model"}  # required: no null
    legacy = CompletionRequest.model_json_schema()["properties"]
    assert legacy["echo"]["anyOf"] == [{"type": "boolean"}, {"type": "null"}] and legacy["echo"]["default"] is False


def test_or_null_joins_an_existing_union() -> None:
    union = {"anyOf": [{"type": "string"}, {"type": "integer"}], "title": "X", "default": "a"}
    assert or_null(union) == {
        "anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}],
        "title": "X",
        "default": "a",
    }
