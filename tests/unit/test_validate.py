"""What vLLM refuses, refused by the gateway before Triton (``plan/validate.py``, ``plan/budget.py``):
the status, the wording and the ``param`` a client sees. Triton's vLLM backend would turn most of
these into a 500 with no reason (tests/vllm_lane checks the same requests against vLLM's server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from gateway.config import Settings
from gateway.errors import InvalidRequestError
from gateway.models.catalog import ServedModel
from gateway.plan.budget import token_budget
from gateway.plan.completions import completion_prompts
from gateway.plan.requests import ChatCompletionRequest, CompletionRequest
from gateway.plan.validate import carries_logit_bias, check_request, check_tool_choice

WEIGHTS = Path(__file__).resolve().parents[2] / "triton_models" / "weights" / "tiny-llm"
TOKENIZER = Tokenizer.from_file(str(WEIGHTS / "tokenizer.json"))
VOCAB = TOKENIZER.get_vocab_size()
TINY = ServedModel(name="m", tokenizer=TOKENIZER, max_model_len=64, backend="python")
UNKNOWN = ServedModel(name="m")  # no tokenizer: the vocabulary size is unknown
SETTINGS = Settings()


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    )


def completion(**fields: Any) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "prompt": "hi", **fields})


def refusal(body: Any, model: ServedModel = TINY, settings: Settings = SETTINGS) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        check_request(body, model, settings)
    assert info.value.status_code == 400
    return info.value


# -- n with greedy sampling: each choice is a request of its own --------------------------------


@pytest.mark.parametrize(
    "fields", [{"n": 1, "temperature": 0}, {"n": 2}, {"n": 2, "temperature": 1e-5}, {"n": 2, "temperature": 0}]
)
def test_n_with_sampling_or_greedy_is_accepted(fields: dict[str, Any]) -> None:
    check_request(completion(**fields), TINY, SETTINGS)
    check_request(chat(**fields), TINY, SETTINGS)


# -- token ids ------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["stop_token_ids", "logit_bias", "allowed_token_ids"])
@pytest.mark.parametrize("model", [TINY, UNKNOWN])
def test_negative_token_ids_are_refused_with_or_without_a_tokenizer(field: str, model: ServedModel) -> None:
    body = completion(**({field: {"-1": 5, "3": 1}} if field == "logit_bias" else {field: [-1, 3]}))
    error = refusal(body, model)
    assert error.param == field
    assert error.message.startswith(f"token_id(s) [-1] in {field} contain out-of-vocab token ids.")


@pytest.mark.parametrize("field", ["stop_token_ids", "logit_bias", "allowed_token_ids"])
def test_token_ids_past_the_vocabulary_are_refused_when_the_tokenizer_is_known(field: str) -> None:
    def body(ids: list[int]) -> CompletionRequest:
        return completion(**({field: {str(i): 1 for i in ids}} if field == "logit_bias" else {field: ids}))

    check_request(body([0, VOCAB - 1]), TINY, SETTINGS)
    error = refusal(body([0, VOCAB, 99999]))
    assert error.param == field
    assert error.message == (
        f"token_id(s) [{VOCAB}, 99999] in {field} contain out-of-vocab token ids. Vocabulary size: {VOCAB}"
    )
    check_request(body([99999]), UNKNOWN, SETTINGS)  # unknown vocabulary: the backend decides


def test_empty_allowed_token_ids_are_refused_as_vllm_refuses_them() -> None:
    error = refusal(chat(allowed_token_ids=[]), UNKNOWN)
    assert (error.param, error.message) == ("allowed_token_ids", "allowed_token_ids is not None and empty!")


# -- logit_bias per backend -----------------------------------------------------------------------


def test_logit_bias_is_refused_for_the_vllm_backend_naming_the_field() -> None:
    vllm = ServedModel(name="big", tokenizer=TOKENIZER, backend="vllm")
    error = refusal(chat(model="big", logit_bias={"5": 10}), vllm)
    assert error.param == "logit_bias"
    assert "'big'" in error.message and "vLLM backend" in error.message
    check_request(chat(model="big", logit_bias={}), vllm, SETTINGS)  # nothing to send, nothing to refuse


@pytest.mark.parametrize(
    ("backend", "override", "carried"),
    [
        ("python", None, True),  # the reference model converts the keys
        ("", None, True),
        ("vllm", None, False),
        ("python", False, False),  # a copy of the vLLM backend's model.py (the vLLM lane)
        ("vllm", True, True),  # a backend fixed to convert them
    ],
)
def test_whether_logit_bias_is_carried(backend: str, override: bool | None, carried: bool) -> None:
    limits = {} if override is None else {"m": {"logit_bias": override}}
    settings = Settings(model_limits=limits)
    assert carries_logit_bias(ServedModel(name="m", backend=backend), settings) is carried
    other = ServedModel(name="other", backend=backend)  # the override is per model
    assert carries_logit_bias(other, settings) is (backend != "vllm")


# -- tools and tool_choice ------------------------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"tool_choice": NAMED}, "tool_choice", "When using `tool_choice`, `tools` must be set."),
        ({"tool_choice": "required"}, "tool_choice", "When using `tool_choice`, `tools` must be set."),
        ({"tool_choice": "auto"}, "tool_choice", "When using `tool_choice`, `tools` must be set."),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "other"}}},
            "tool_choice",
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
        ),
        ({"tools": [TOOL], "tool_choice": "sometimes"}, "tool_choice", "Invalid value for `tool_choice`: sometimes!"),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function"}},
            "tool_choice.function",
            "Invalid value for `function`",
        ),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": ""}}},
            "tool_choice.function.name",
            "Invalid `name` in `function`",
        ),
        ({"tools": []}, "tools", "`tools` must not be an empty array."),
    ],
)
def test_tool_choice_must_agree_with_tools(fields: dict[str, Any], param: str, message: str) -> None:
    error = refusal(chat(**fields))
    assert error.param == param
    assert error.message.startswith(message)


@pytest.mark.parametrize(
    "fields",
    [{}, {"tool_choice": "none"}, {"tool_choice": None}, {"tools": [TOOL]}, {"tools": [TOOL], "tool_choice": NAMED}],
)
def test_consistent_tool_choice_passes_this_check(fields: dict[str, Any]) -> None:
    check_tool_choice(chat(**fields))  # (tool calling itself is refused later, naming `tools`)


# -- the prompt and min_tokens (per prompt, in the token budget) ----------------------------------


# -- structured_outputs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("structured", "fragment"),
    [
        ({}, "got none"),
        ({"json_object": False}, "got none"),
        ({"disable_any_whitespace": True}, "got none"),
        ({"regex": "a+", "choice": ["a"]}, "got ['regex', 'choice']"),
        ({"json": {"type": "object"}, "json_object": True}, "got ['json', 'json_object']"),
    ],
)
@pytest.mark.parametrize("make", [chat, completion])
def test_structured_outputs_need_exactly_one_constraint(make: Any, structured: dict[str, Any], fragment: str) -> None:
    error = refusal(make(structured_outputs=structured))
    assert error.param == "structured_outputs"
    assert fragment in str(error)


@pytest.mark.parametrize("kind", ["json_object", "json_schema"])
def test_structured_outputs_with_a_json_response_format_is_refused_naming_structured_outputs(kind: str) -> None:
    body = chat(response_format={"type": kind}, structured_outputs={"regex": "a+"})
    error = refusal(body)
    assert error.param == "structured_outputs"
    assert "response_format" in str(error)


@pytest.mark.parametrize(
    "fields",
    [
        {"structured_outputs": {"regex": "a+"}},
        {"structured_outputs": {"choice": ["a"], "json_object": False, "disable_any_whitespace": True}},
        {"structured_outputs": {"json": {"type": "object"}}, "response_format": {"type": "text"}},
    ],
)
def test_one_constraint_passes_this_check(fields: dict[str, Any]) -> None:
    check_request(chat(**fields), TINY, SETTINGS)


@pytest.mark.parametrize("prompt", ["", ["hello", ""]])
def test_an_empty_completion_prompt_is_refused(prompt: Any) -> None:
    with pytest.raises(InvalidRequestError) as info:
        completion_prompts(completion(prompt=prompt))
    assert info.value.param == "prompt"


def test_a_prompt_of_no_tokens_is_refused_naming_where_it_came_from() -> None:
    assert TOKENIZER.encode("").ids == []
    with pytest.raises(InvalidRequestError) as info:
        token_budget(None, TINY, "", SETTINGS, param="messages")
    assert info.value.message == "The decoder prompt cannot be empty"
    assert info.value.param == "messages"
    assert token_budget(None, UNKNOWN, "", SETTINGS)[1] is None  # no tokenizer: the backend decides


@pytest.mark.parametrize(
    ("requested", "cap", "sent"),
    [
        (3, None, 3),  # as asked
        (None, 4, 4),  # the configured cap clamps the default
        (None, None, None),  # the room the context leaves (64 - prompt tokens)
    ],
)
def test_min_tokens_over_the_max_tokens_sent_is_refused(
    requested: int | None, cap: int | None, sent: int | None
) -> None:
    settings = Settings(max_tokens_limit=cap)
    max_tokens, prompt_tokens = token_budget(requested, TINY, "hello", settings)
    assert prompt_tokens is not None
    assert max_tokens == (sent if sent is not None else 64 - prompt_tokens)
    assert token_budget(requested, TINY, "hello", settings, min_tokens=max_tokens)[0] == max_tokens
    with pytest.raises(InvalidRequestError) as info:
        token_budget(requested, TINY, "hello", settings, min_tokens=max_tokens + 1)
    assert info.value.param == "min_tokens"
    assert (
        info.value.message == f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {max_tokens + 1}."
    )
