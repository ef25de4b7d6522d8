"""OpenAI request fields → the vLLM ``SamplingParams`` JSON the backend gets, ``max_tokens``
resolution, and the request-shape 4xx decisions (with the ``param`` a client sees).

Requests are built through the wire models (``model_validate`` on JSON-like dicts), the way the
routes build them, so lax inputs ("0.5", "false") are covered too."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.errors import ContextLengthExceededError, InvalidRequestError
from gateway.models.catalog import ServedModel
from gateway.models.resolve import ResolvedModel
from gateway.plan.budget import check_prompt_limits, resolve_max_tokens
from gateway.plan.chat import chat_max_tokens
from gateway.plan.limits import check_chat_limits, check_sampling_limits
from gateway.plan.requests import ChatCompletionRequest, CompletionRequest
from gateway.plan.sampling import (
    stop_list,
    structured_outputs,
    to_generation_requests,
    to_sampling_params,
)


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    )


def completion(**fields: Any) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "prompt": "hi", **fields})


def params(request: Any, *, max_tokens: int = 16, adapter: str | None = None, logprobs: int | None = None) -> Any:
    out = to_sampling_params(request, max_tokens=max_tokens, adapter=adapter, logprobs=logprobs)
    # What goes on the wire must be JSON as-is (no default= hook, no str() of anything).
    assert orjson.loads(orjson.dumps(out)) == out
    return out


# -- the JSON -------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [chat, completion])
def test_an_empty_request_sends_only_max_tokens_and_n(make: Any) -> None:
    assert params(make(), max_tokens=42) == {"max_tokens": 42, "n": 1}


EVERY_FIELD = {
    "temperature": 0.7,
    "top_p": 0.9,
    "presence_penalty": -1.5,
    "frequency_penalty": 2.0,
    "seed": 1234,
    "top_k": 40,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
    "min_tokens": 3,
    "ignore_eos": True,
    "stop_token_ids": [7, 8],
    "skip_special_tokens": False,
}


@pytest.mark.parametrize("make", [chat, completion])
def test_every_pass_through_field_keeps_its_value_and_json_type(make: Any) -> None:
    sent = params(make(n=3, **EVERY_FIELD), max_tokens=5)
    assert sent == {"max_tokens": 5, "n": 1, **EVERY_FIELD}  # n choices are n requests
    for name, value in EVERY_FIELD.items():
        assert type(sent[name]) is type(value), name


def test_lax_inputs_become_real_json_types() -> None:
    # The vLLM backend coerces with bool("false") == True: a string must never reach it.
    sent = params(
        chat(
            temperature="0.5",
            ignore_eos="false",
            skip_special_tokens="true",
            seed="7",
            top_k=5.0,
            n=True,
            stop_token_ids=["3"],
        )
    )
    assert sent["temperature"] == 0.5 and type(sent["temperature"]) is float
    assert sent["ignore_eos"] is False
    assert sent["skip_special_tokens"] is True
    assert sent["seed"] == 7 and type(sent["seed"]) is int
    assert sent["top_k"] == 5 and type(sent["top_k"]) is int
    assert sent["n"] == 1 and type(sent["n"]) is int
    assert sent["stop_token_ids"] == [3]
    assert b'"ignore_eos":false' in orjson.dumps(sent)


def test_an_integer_temperature_is_sent_as_a_float() -> None:
    assert type(params(chat(temperature=1))["temperature"]) is float


@pytest.mark.parametrize("name", sorted(EVERY_FIELD))
def test_null_means_unset(name: str) -> None:
    assert name not in params(chat(**{name: None}))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("temperature", 0.0),
        ("presence_penalty", 0.0),
        ("frequency_penalty", 0.0),
        ("seed", 0),
        ("top_k", 0),
        ("top_k", -1),
        ("min_p", 0.0),
        ("min_tokens", 0),
        ("ignore_eos", False),
        ("skip_special_tokens", False),
        ("stop_token_ids", []),
    ],
)
def test_falsy_values_are_still_sent(name: str, value: Any) -> None:
    sent = params(chat(**{name: value}))
    assert sent[name] == value
    assert type(sent[name]) is type(value)


def test_unknown_fields_never_reach_the_backend() -> None:
    # Kept by the lenient schema, but an unknown key fails the vLLM backend's parse.
    sent = params(chat(best_of=2, guided_json={"type": "object"}, foo="bar", user="u", stream_options=None))
    assert sent == {"max_tokens": 16, "n": 1}


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        (None, None),
        ("END", ["END"]),
        (["a", "b"], ["a", "b"]),
        ([], None),
        ([""], None),
        (["", "x", ""], ["x"]),
        # An empty stop string would end every generation at once; vLLM refuses it
        # ("stop cannot contain an empty string."), so it is dropped like an empty list entry.
        ("", None),
    ],
)
def test_stop_strings(stop: Any, expected: list[str] | None) -> None:
    sent = params(chat(stop=stop))
    assert sent.get("stop") == expected
    assert stop_list(stop) == (expected or [])


def test_at_most_16_stop_strings() -> None:
    assert params(chat(stop=[f"s{i}" for i in range(16)]))["stop"][-1] == "s15"
    with pytest.raises(ValidationError):
        chat(stop=[f"s{i}" for i in range(17)])


def test_include_stop_str_in_output_only_when_true() -> None:
    assert params(chat(include_stop_str_in_output=True))["include_stop_str_in_output"] is True
    assert "include_stop_str_in_output" not in params(chat(include_stop_str_in_output=False))


def test_logit_bias_keys_are_canonical_ids_and_values_floats() -> None:
    sent = params(chat(logit_bias={"50256": -100, "007": 5, "3": 0.5}))
    assert sent["logit_bias"] == {"50256": -100.0, "7": 5.0, "3": 0.5}
    assert all(type(v) is float for v in sent["logit_bias"].values())


def test_empty_logit_bias_is_not_sent() -> None:
    assert "logit_bias" not in params(chat(logit_bias={}))
    assert "logit_bias" not in params(chat(logit_bias=None))


@pytest.mark.parametrize("bias", [{"word": 1}, {"1": 100.5}, {"1": -101}, {"": 1}])
def test_invalid_logit_bias_is_refused_by_the_schema(bias: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        chat(logit_bias=bias)


@pytest.mark.parametrize("logprobs", [0, 5, 20])
def test_logprobs_count_is_sent_as_given(logprobs: int) -> None:
    sent = params(chat(), logprobs=logprobs)
    assert sent["logprobs"] == logprobs and type(sent["logprobs"]) is int


def test_no_logprobs_sends_no_key() -> None:
    assert "logprobs" not in params(chat(logprobs=True))  # the caller decides the count


def test_adapter_travels_as_lora_name() -> None:
    assert params(chat(), adapter="alpha")["lora_name"] == "alpha"
    assert "lora_name" not in params(chat())


# -- response_format → structured_outputs ---------------------------------------------------------


def test_response_format_text_sends_nothing() -> None:
    assert "structured_outputs" not in params(chat(response_format={"type": "text"}))


def test_response_format_json_object() -> None:
    sent = params(chat(response_format={"type": "json_object"}))
    assert isinstance(sent["structured_outputs"], str)  # a JSON string inside the JSON
    assert orjson.loads(sent["structured_outputs"]) == {"json_object": True}


def test_response_format_json_schema_sends_the_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    request = chat(
        response_format={"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": schema}}
    )
    sent = params(request)
    assert orjson.loads(sent["structured_outputs"]) == {"json": schema}
    assert structured_outputs(request) == sent["structured_outputs"]


def test_response_format_json_schema_without_a_schema_allows_any_json() -> None:
    sent = params(chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}))
    assert orjson.loads(sent["structured_outputs"]) == {"json": {}}
    sent = params(chat(response_format={"type": "json_schema"}))
    assert orjson.loads(sent["structured_outputs"]) == {"json": {}}


def test_unknown_response_format_type_is_refused() -> None:
    with pytest.raises(ValidationError):
        chat(response_format={"type": "yaml"})


def test_legacy_completions_take_response_format_as_vllm_does() -> None:
    sent = params(completion(response_format={"type": "json_object"}))
    assert orjson.loads(sent["structured_outputs"]) == {"json_object": True}


def test_vllm_sampling_extras_are_sent_under_sampling_params_names() -> None:
    sent = params(
        chat(
            bad_words=["foo", "bar baz"],
            allowed_token_ids=[1, 2, 3],
            spaces_between_special_tokens=False,
            vllm_xargs={"my_processor": 1},
        )
    )
    assert sent["bad_words"] == ["foo", "bar baz"]
    assert sent["allowed_token_ids"] == [1, 2, 3]
    assert sent["spaces_between_special_tokens"] is False
    assert sent["extra_args"] == {"my_processor": 1}


def test_unset_vllm_sampling_extras_are_not_sent() -> None:
    sent = params(chat(bad_words=[], allowed_token_ids=None))
    assert not {"bad_words", "allowed_token_ids", "spaces_between_special_tokens", "extra_args"} & sent.keys()


# -- vLLM's structured_outputs extra ----------------------------------------------------------------


@pytest.mark.parametrize("make", [chat, completion])
@pytest.mark.parametrize(
    "given",
    [
        {"json": {"type": "object", "properties": {"a": {"type": "integer"}}}},
        {"json": '{"type": "object"}'},
        {"json_object": True},
        {"regex": "[a-z]+"},
        {"choice": ["yes", "no"]},
        {"grammar": 'root ::= "a"'},
        {"regex": "a", "disable_any_whitespace": True, "structural_tag": None},
    ],
)
def test_structured_outputs_travel_as_given_in_a_json_string(make: Any, given: dict[str, Any]) -> None:
    sent = params(make(structured_outputs=given))
    assert isinstance(sent["structured_outputs"], str)
    assert orjson.loads(sent["structured_outputs"]) == {k: v for k, v in given.items() if v is not None}


def test_a_false_json_object_is_dropped_as_vllm_would_count_it() -> None:
    sent = params(chat(structured_outputs={"json_object": False, "choice": ["a"]}))
    assert orjson.loads(sent["structured_outputs"]) == {"choice": ["a"]}


@pytest.mark.parametrize("bad", [{"regex": 5}, {"choice": "yes"}, {"json": 3}, {"json_object": [1]}, "regex"])
def test_structured_outputs_of_the_wrong_type_are_refused_by_the_schema(bad: Any) -> None:
    with pytest.raises(ValidationError):
        chat(structured_outputs=bad)


# -- property: any valid mix of fields ------------------------------------------------------------

FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "temperature": st.floats(0.0, 2.0),
    "top_p": st.floats(0.0, 1.0, exclude_min=True),
    "presence_penalty": st.floats(-2.0, 2.0),
    "frequency_penalty": st.floats(-2.0, 2.0),
    "seed": st.integers(-(2**63), 2**63 - 1),  # the schema's int64 range, as vLLM's server
    "top_k": st.integers(-1, 1000),
    "min_p": st.floats(0.0, 1.0),
    "repetition_penalty": st.floats(0.0, 10.0, exclude_min=True),
    "min_tokens": st.integers(0, 100),
    "ignore_eos": st.booleans(),
    "stop_token_ids": st.lists(st.integers(0, 100_000), max_size=4),
    "skip_special_tokens": st.booleans(),
}


@given(
    st.fixed_dictionaries({}, optional={k: st.one_of(st.none(), v) for k, v in FIELD_VALUES.items()}),
    st.integers(1, 128),
    st.integers(1, 100_000),
)
def test_any_valid_request_sends_exactly_the_fields_set(fields: dict[str, Any], n: int, max_tokens: int) -> None:
    # n is not among them: each choice is its own single-sequence request
    sent = params(chat(n=n, **fields), max_tokens=max_tokens)
    expected = {k: v for k, v in fields.items() if v is not None}
    assert sent == {"max_tokens": max_tokens, "n": 1, **expected}
    for name, value in expected.items():
        assert type(sent[name]) is type(value), name


# -- max_tokens -----------------------------------------------------------------------------------


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert chat_max_tokens(chat(max_tokens=10, max_completion_tokens=20)) == 20
    assert chat_max_tokens(chat(max_tokens=10)) == 10
    assert chat_max_tokens(chat(max_completion_tokens=7)) == 7
    assert chat_max_tokens(chat()) is None


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", [0, -1])
def test_max_tokens_below_one_is_refused(field: str, value: int) -> None:
    with pytest.raises(ValidationError):
        chat(**{field: value})


@pytest.mark.parametrize(
    ("requested", "prompt_tokens", "max_model_len", "expected"),
    [
        (None, None, None, 256),  # nothing known: the configured fallback
        (10, None, None, 10),
        (None, 5, None, 256),  # no context length: the fallback
        (None, None, 64, 256),  # no token count: the fallback
        (None, 10, 64, 54),  # all the room the context leaves
        (54, 10, 64, 54),  # exactly the room
        (1, 63, 64, 1),
        (5, 10, 64, 5),
        (100_000, 10, None, 100_000),
    ],
)
def test_resolve_max_tokens(
    requested: int | None, prompt_tokens: int | None, max_model_len: int | None, expected: int
) -> None:
    assert (
        resolve_max_tokens(requested, prompt_tokens=prompt_tokens, max_model_len=max_model_len, fallback=256)
        == expected
    )


@pytest.mark.parametrize(
    ("requested", "prompt_tokens", "total", "completion"),
    [
        (55, 10, 65, 55),  # one over the room
        (None, 64, 65, 1),  # the prompt fills the context
        (None, 70, 71, 1),  # the prompt alone is too long
        (1, 64, 65, 1),
    ],
)
def test_not_fitting_the_context_is_openais_400(
    requested: int | None, prompt_tokens: int, total: int, completion: int
) -> None:
    with pytest.raises(ContextLengthExceededError) as info:
        resolve_max_tokens(requested, prompt_tokens=prompt_tokens, max_model_len=64, fallback=256)
    error = info.value
    assert error.status_code == 400
    assert error.code == "context_length_exceeded"
    assert error.error_type == "invalid_request_error"
    assert error.param == "messages"
    assert error.message == (
        f"This model's maximum context length is 64 tokens. However, you requested {total} tokens "
        f"({prompt_tokens} in the messages, {completion} in the completion). "
        "Please reduce the length of the messages or completion."
    )


@given(st.one_of(st.none(), st.integers(1, 5000)), st.integers(0, 5000), st.integers(1, 5000))
def test_resolved_max_tokens_always_fits_or_raises(
    requested: int | None, prompt_tokens: int, max_model_len: int
) -> None:
    try:
        got = resolve_max_tokens(requested, prompt_tokens=prompt_tokens, max_model_len=max_model_len, fallback=7)
    except ContextLengthExceededError:
        assert prompt_tokens + (requested or 1) > max_model_len
        return
    assert 1 <= got
    assert prompt_tokens + got <= max_model_len
    assert got == (requested if requested is not None else max_model_len - prompt_tokens)


# -- the backend request --------------------------------------------------------------------------


def test_generation_request_targets_the_base_model_with_the_adapter_in_sampling() -> None:
    model = ServedModel(name="tiny-llm", adapters=("alpha",), inputs=frozenset({"text_input", "sampling_parameters"}))
    (generation,) = to_generation_requests(
        chat(model="tiny-llm:alpha", stream=True, temperature=0.0),
        ResolvedModel(model, "alpha"),
        request_ids=["rid"],
        prompt="<p>",
        max_tokens=9,
        logprobs=2,
        deadline=123.5,
    )
    assert generation.model == "tiny-llm"
    assert generation.request_id == "rid"
    assert generation.prompt == "<p>"
    assert generation.stream is True
    assert generation.return_logprobs is True
    assert generation.deadline == 123.5
    assert generation.inputs == model.inputs
    assert generation.sampling == {"max_tokens": 9, "n": 1, "temperature": 0.0, "logprobs": 2, "lora_name": "alpha"}


def test_generation_request_without_logprobs_or_stream() -> None:
    (generation,) = to_generation_requests(
        completion(),
        ResolvedModel(ServedModel(name="m"), None),
        request_ids=["r"],
        prompt="p",
        max_tokens=1,
        logprobs=None,
        deadline=None,
    )
    assert generation.stream is False
    assert generation.return_logprobs is False
    assert generation.deadline is None
    assert "lora_name" not in generation.sampling


@pytest.mark.parametrize(("seed", "expected"), [(7, [7, 8, 9]), (None, [None, None, None])])
def test_n_choices_are_single_sequence_requests_seeded_as_vllm_seeds_its_children(
    seed: int | None, expected: list[int | None]
) -> None:
    # vLLM's n > 1 runs child i with seed + i (unseeded children share the parameters): the
    # same requests, one per choice, give the same choices.
    generations = to_generation_requests(
        chat(n=3, seed=seed, temperature=1.0),
        ResolvedModel(ServedModel(name="m"), None),
        request_ids=["r-0", "r-1", "r-2"],
        prompt="p",
        max_tokens=4,
        logprobs=None,
        deadline=None,
    )
    assert [g.request_id for g in generations] == ["r-0", "r-1", "r-2"]
    assert [g.sampling["n"] for g in generations] == [1, 1, 1]
    assert [g.sampling.get("seed") for g in generations] == expected
    assert all(g.sampling["temperature"] == 1.0 and g.prompt == "p" for g in generations)


# -- request-shape 4xx decisions ------------------------------------------------------------------


def test_n_over_the_gateway_limit() -> None:
    check_sampling_limits(chat(n=4), max_n=4)
    with pytest.raises(InvalidRequestError) as info:
        check_sampling_limits(chat(n=5), max_n=4)
    assert info.value.param == "n"
    assert info.value.status_code == 400


def test_stream_options_need_stream() -> None:
    check_sampling_limits(chat(stream=True, stream_options={"include_usage": True}), max_n=1)
    with pytest.raises(InvalidRequestError) as info:
        check_sampling_limits(completion(stream_options={"include_usage": True}), max_n=1)
    assert info.value.param == "stream_options"


def test_too_many_messages() -> None:
    messages = [{"role": "user", "content": "x"}] * 3
    check_chat_limits(chat(messages=messages), max_n=1, max_messages=3)
    with pytest.raises(InvalidRequestError) as info:
        check_chat_limits(chat(messages=messages), max_n=1, max_messages=2)
    assert info.value.param == "messages"


def test_top_logprobs_needs_logprobs() -> None:
    check_chat_limits(chat(logprobs=True, top_logprobs=3), max_n=1, max_messages=9)
    check_chat_limits(chat(top_logprobs=None), max_n=1, max_messages=9)
    with pytest.raises(InvalidRequestError) as info:
        check_chat_limits(chat(top_logprobs=3), max_n=1, max_messages=9)
    assert info.value.param == "top_logprobs"


def test_prompt_and_max_tokens_caps() -> None:
    check_prompt_limits("x" * 10, 8, max_prompt_chars=10, max_tokens_cap=8)
    check_prompt_limits("x", 10**9, max_prompt_chars=10, max_tokens_cap=None)
    with pytest.raises(InvalidRequestError) as info:
        check_prompt_limits("x" * 11, None, max_prompt_chars=10, max_tokens_cap=None)
    assert info.value.code == "prompt_too_long"
    with pytest.raises(InvalidRequestError) as info:
        check_prompt_limits("x", 9, max_prompt_chars=10, max_tokens_cap=8)
    assert info.value.param == "max_tokens"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 2.01),
        ("temperature", -0.1),
        ("top_p", 0.0),
        ("top_p", 1.01),
        ("n", 0),
        ("n", 129),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -2.5),
        ("top_k", -2),
        ("min_p", 1.5),
        ("repetition_penalty", 0.0),
        ("min_tokens", -1),
        ("top_logprobs", 21),
        ("ignore_eos", "maybe"),
        ("seed", 1.5),
        ("seed", 2**63),  # int64, as vLLM's server (a larger one used to fail the JSON encoding: a 500)
        ("seed", -(2**63) - 1),
    ],
)
def test_out_of_range_values_are_refused_by_the_schema(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as info:
        chat(**{field: value})
    assert info.value.errors()[0]["loc"][0] == field


def test_zero_top_logprobs_still_asks_for_the_chosen_tokens_logprobs() -> None:
    # Chat's logprobs=true without top_logprobs is logprobs 0: the backend must still return them.
    (generation,) = to_generation_requests(
        chat(logprobs=True),
        ResolvedModel(ServedModel(name="m"), None),
        request_ids=["r"],
        prompt="p",
        max_tokens=1,
        logprobs=0,
        deadline=None,
    )
    assert generation.return_logprobs is True
    assert generation.sampling["logprobs"] == 0
