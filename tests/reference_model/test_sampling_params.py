"""sampling_parameters parsing: vLLM names and defaults, strict types, the key named in every error."""

from __future__ import annotations

import json

import pytest
from sampling_params import (
    SamplingLimits,
    SamplingParams,
    SamplingParamsError,
    parse_sampling_parameters,
)
from structured_outputs import StructuredOutputs

LIMITS = SamplingLimits(vocab_size=100, max_logprobs=20, max_n=8, lora_names=("alpha", "beta"))


def parse(data: object) -> SamplingParams:
    return parse_sampling_parameters(json.dumps(data), LIMITS)


def test_absent_or_empty_parameters_give_vllm_defaults() -> None:
    for raw in (None, b"", "{}"):
        params = parse_sampling_parameters(raw, LIMITS)
        assert params == SamplingParams()
    assert SamplingParams().max_tokens == 16


def test_all_supported_fields_parse() -> None:
    params = parse(
        {
            "n": 2,
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 5,
            "min_p": 0.1,
            "max_tokens": 32,
            "min_tokens": 2,
            "seed": 7,
            "stop": ["a", "bc"],
            "stop_token_ids": [4, 2],
            "repetition_penalty": 1.1,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "ignore_eos": True,
            "logprobs": 3,
            "logit_bias": {"5": 10, "6": -200},
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
            "lora_name": "beta",
        }
    )
    assert params.n == 2 and params.top_k == 5 and params.stop == ("a", "bc")
    assert params.stop_token_ids == (4, 2)
    assert params.logit_bias == {5: 10.0, 6: -100.0}  # clamped like vLLM/OpenAI
    assert params.lora_name == "beta" and params.include_stop_str_in_output
    assert not params.greedy


def test_single_stop_string_becomes_a_tuple() -> None:
    assert parse({"stop": "END"}).stop == ("END",)


def test_null_means_default() -> None:
    assert parse({"seed": None, "max_tokens": None, "stop": None}) == SamplingParams(max_tokens=16)


def test_temperature_zero_is_greedy() -> None:
    assert parse({"temperature": 0}).greedy


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"max_tokens": "5"}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"min_p": 2}, "min_p"),
        ({"n": 0}, "n"),
        ({"n": 9}, "n"),
        ({"min_tokens": 20, "max_tokens": 10}, "min_tokens"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"ignore_eos": "false"}, "ignore_eos"),
        ({"stop": ["ok", 3]}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"stop_token_ids": [1000]}, "stop_token_ids"),
        ({"stop_token_ids": 4}, "stop_token_ids"),
        ({"logprobs": 21}, "logprobs"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {"100": 1}}, "logit_bias"),
        ({"logit_bias": [1]}, "logit_bias"),
        ({"seed": "1"}, "seed"),
        ({"lora_name": 3}, "lora_name"),
        ({"best_of": 2}, "best_of"),
        ({"bad_words": "word"}, "bad_words"),
        ({"bad_words": ["ok", 1]}, "bad_words"),
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"allowed_token_ids": [100]}, "allowed_token_ids"),
        ({"spaces_between_special_tokens": 1}, "spaces_between_special_tokens"),
        ({"maxTokens": 2}, "maxTokens"),
    ],
)
def test_bad_values_and_unknown_keys_name_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(SamplingParamsError, match=f"'{key}'"):
        parse(data)


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_malformed_json_is_an_error(raw: bytes) -> None:
    with pytest.raises(SamplingParamsError, match="sampling_parameters"):
        parse_sampling_parameters(raw, LIMITS)


@pytest.mark.parametrize("key", ["structured_outputs", "guided_decoding"])
@pytest.mark.parametrize("encode", [json.dumps, lambda value: value], ids=["json-string", "object"])
def test_structured_outputs_parse_from_either_key_as_string_or_object(key: str, encode: object) -> None:
    params = parse({key: encode({"json": {"type": "object"}})})  # type: ignore[operator]
    assert params.structured == StructuredOutputs(kind="json", spec={"type": "object"})


def test_structured_outputs_under_both_keys_is_an_error() -> None:
    with pytest.raises(SamplingParamsError, match="^structured outputs: .*not both"):
        parse({"structured_outputs": {"regex": "a"}, "guided_decoding": {"regex": "b"}})


def test_structured_outputs_null_means_none() -> None:
    assert parse({"structured_outputs": None}).structured is None


def test_unknown_lora_uses_the_vllm_backend_wording() -> None:
    with pytest.raises(SamplingParamsError) as info:
        parse({"lora_name": "gamma"})
    assert str(info.value) == "LoRA gamma is not supported, we currently support ['alpha', 'beta']"


def test_vllm_token_extras_parse() -> None:
    params = parse({"bad_words": ["a", "b", "a"], "allowed_token_ids": [3, 5], "spaces_between_special_tokens": False})
    assert params.bad_words == ("a", "b")
    assert params.allowed_token_ids == (3, 5)
    assert params.spaces_between_special_tokens is False
