"""Structured outputs enforced on the real tiny-llm weights: every sequence follows its grammar.

The model has random weights, so without the mask none of these outputs would parse; with it they
must, whatever the seed. Schemas are bounded (maxLength, maximum, maxItems) so that a random model
finishes them well within ``max_tokens``.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from engine import TinyLlmEngine
from generator import FINISH_LENGTH, FINISH_STOP, Generation, SequenceDelta, merge_deltas
from grammar import GrammarError
from sampling_params import SamplingParams
from structured_outputs import StructuredOutputs

from gateway.backend.triton import classify_stream_error
from gateway.errors import InvalidRequestError

PROMPT = "<|im_start|>user\nGive me JSON<|im_end|>\n<|im_start|>assistant\n"
EOS = (4, 2)
QUOTE, CLOSE_BRACE = 6, 97
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "color": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "color", "tags", "address"],
    "additionalProperties": False,
}


def generate(engine: TinyLlmEngine, kind: str, spec: object, **fields: object) -> list[SequenceDelta]:
    """Every sequence's merged delta."""
    params = SamplingParams(**{"max_tokens": 200, **fields, "structured": StructuredOutputs(kind, spec)})  # type: ignore[arg-type]
    generation = Generation(engine, engine.tokenize(PROMPT), params)
    merged: list[SequenceDelta | None] = [None] * params.n
    while not generation.finished:
        merged = [merge_deltas(old, new) for old, new in zip(merged, generation.step(), strict=True)]
    return [delta for delta in merged if delta is not None]


@pytest.mark.parametrize("seed", range(10))
def test_json_schema_output_validates_for_every_seed(engine: TinyLlmEngine, seed: int) -> None:
    (delta,) = generate(engine, "json", SCHEMA, seed=seed, temperature=1.0)
    assert delta.finish_reason == FINISH_STOP
    jsonschema.validate(json.loads(delta.text), SCHEMA)
    assert b" " not in delta.text.split(b'"')[0]  # compact: no whitespace before the first string


def test_n_sequences_each_follow_the_grammar_on_their_own(engine: TinyLlmEngine) -> None:
    deltas = generate(engine, "json", SCHEMA, seed=3, n=4)
    assert len({delta.text for delta in deltas}) == 4
    for delta in deltas:
        jsonschema.validate(json.loads(delta.text), SCHEMA)


def test_same_seed_same_output_under_a_grammar(engine: TinyLlmEngine) -> None:
    assert generate(engine, "json", SCHEMA, seed=11) == generate(engine, "json", SCHEMA, seed=11)


@pytest.mark.parametrize("lora_name", ["alpha", "beta"])
def test_lora_adapters_follow_the_grammar(engine: TinyLlmEngine, lora_name: str) -> None:
    (delta,) = generate(engine, "json", SCHEMA, seed=1, lora_name=lora_name)
    jsonschema.validate(json.loads(delta.text), SCHEMA)


def test_json_object_is_any_object(engine: TinyLlmEngine) -> None:
    # Random weights write endless strings; the bias only makes the object close sooner.
    for seed in range(5):
        (delta,) = generate(engine, "json_object", None, seed=seed, logit_bias={QUOTE: 4.0, CLOSE_BRACE: 4.0})
        assert delta.finish_reason == FINISH_STOP
        assert isinstance(json.loads(delta.text), dict)


def test_choice_returns_one_of_the_choices(engine: TinyLlmEngine) -> None:
    choices = ["yes", "no", "café", 'a "quoted" one']
    deltas = generate(engine, "choice", choices, seed=2, n=8)
    assert {delta.text.decode() for delta in deltas} <= set(choices)
    assert all(delta.finish_reason == FINISH_STOP for delta in deltas)


def test_regex_output_matches(engine: TinyLlmEngine) -> None:
    pattern = r"[a-z]{3}-[0-9]{2,4}"
    for delta in generate(engine, "regex", pattern, seed=5, n=6):
        assert re.fullmatch(pattern, delta.text.decode()), delta.text


@pytest.mark.parametrize(
    "grammar",
    ['start: "A" DIGITS "!"\nDIGITS: /[0-9]{1,4}/', 'root ::= "A" [0-9] [0-9]? [0-9]? [0-9]? "!"'],
    ids=["lark", "gbnf"],
)
def test_grammar_in_lark_or_gbnf(engine: TinyLlmEngine, grammar: str) -> None:
    for delta in generate(engine, "grammar", grammar, seed=7, n=4):
        assert re.fullmatch(r"A[0-9]{1,4}!", delta.text.decode()), delta.text


def test_eos_is_allowed_only_where_the_grammar_accepts(engine: TinyLlmEngine) -> None:
    # EOS pushed as hard as logit_bias allows: it still cannot cut "[0-9]{3}" short.
    (delta,) = generate(engine, "regex", "[0-9]{3}([a-z]+)?", temperature=0, logit_bias=dict.fromkeys(EOS, 100.0))
    assert delta.finish_reason == FINISH_STOP
    assert re.fullmatch(r"[0-9]{3}", delta.text.decode())
    assert delta.num_tokens <= 4  # three digits at most, then the EOS the bias forces


def test_a_complete_grammar_ends_with_stop_without_an_eos_token(engine: TinyLlmEngine) -> None:
    (delta,) = generate(engine, "choice", ["yes"], temperature=0, ignore_eos=True)
    assert delta.text == b"yes" and delta.finish_reason == FINISH_STOP
    assert delta.num_tokens == len(engine.tokenize("yes"))


def test_ignore_eos_keeps_an_open_grammar_going_to_max_tokens(engine: TinyLlmEngine) -> None:
    (delta,) = generate(engine, "regex", "[0-9]+", seed=1, max_tokens=12, ignore_eos=True)
    assert delta.finish_reason == FINISH_LENGTH and delta.num_tokens == 12
    assert delta.text.isdigit()


def test_logprobs_stay_the_raw_model_logprobs(engine: TinyLlmEngine) -> None:
    # "{" is the only token the grammar allows first: a masked logprob would be 0.
    (delta,) = generate(engine, "json_object", None, temperature=0, max_tokens=1, logprobs=2)
    assert delta.logprobs is not None
    first = delta.logprobs[0]
    chosen = next(iter(first.values()))
    assert chosen["decoded_token"] == "{"
    assert chosen["logprob"] < 0 and len(first) == 3  # the chosen token, then the raw top 2


@pytest.mark.parametrize(
    ("kind", "spec", "fragment"),
    [
        ("json", {"type": "nonsense"}, "invalid JSON schema: Invalid type: nonsense"),
        ("regex", "(ab", "invalid regex"),
        ("grammar", "start: undefined_rule", "invalid grammar"),
    ],
)
def test_invalid_constraints_fail_before_generating_with_a_mappable_message(
    engine: TinyLlmEngine, kind: str, spec: object, fragment: str
) -> None:
    with pytest.raises(GrammarError) as info:
        generate(engine, kind, spec)
    assert fragment in str(info.value)
    error = classify_stream_error(str(info.value))
    assert isinstance(error, InvalidRequestError) and error.param == "response_format"
