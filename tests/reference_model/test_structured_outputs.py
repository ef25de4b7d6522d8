"""The structured_outputs value: vLLM's shapes, exactly one constraint, strict types, gateway-mappable errors."""

from __future__ import annotations

import json

import pytest
from structured_outputs import StructuredOutputs, StructuredOutputsError, parse_structured_outputs

from gateway.backend.triton import classify_stream_error
from gateway.errors import InvalidRequestError

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"json": SCHEMA}, StructuredOutputs("json", SCHEMA)),
        ({"json": json.dumps(SCHEMA)}, StructuredOutputs("json", SCHEMA)),
        ({"json_object": True}, StructuredOutputs("json_object", None)),
        ({"regex": "[a-z]+"}, StructuredOutputs("regex", "[a-z]+")),
        ({"choice": ["yes", "no"]}, StructuredOutputs("choice", ("yes", "no"))),
        ({"grammar": 'start: "x"'}, StructuredOutputs("grammar", 'start: "x"')),
        # vLLM sends every field of its dataclass: unset ones as null, options alongside.
        (
            {"json": None, "regex": "a", "choice": None, "disable_any_whitespace": True, "disable_fallback": False},
            StructuredOutputs("regex", "a"),
        ),
        ({"json_object": False, "choice": ["a"]}, StructuredOutputs("choice", ("a",))),
    ],
)
def test_each_vllm_constraint_parses(value: dict[str, object], expected: StructuredOutputs) -> None:
    assert parse_structured_outputs("structured_outputs", value) == expected
    assert parse_structured_outputs("structured_outputs", json.dumps(value)) == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({}, "holds no constraint"),
        ({"json_object": False}, "holds no constraint"),
        ({"regex": "a", "choice": ["a"]}, "only one constraint may be given, got ['regex', 'choice']"),
        ({"structural_tag": "{}"}, "unknown key 'structural_tag'"),
        ({"whitespace_pattern": " "}, "unknown key 'whitespace_pattern'"),
        ({"json": 5}, "'json' must be a JSON object"),
        ({"json": "{nope"}, "'json' is not valid JSON"),
        ({"json": "[1]"}, "'json' must be a JSON object"),
        ({"json_object": 1}, "'json_object' must be true or false"),
        ({"regex": ""}, "'regex' must be a non-empty string"),
        ({"grammar": 3}, "'grammar' must be a non-empty string"),
        ({"choice": []}, "'choice' must be a non-empty list of strings"),
        ({"choice": "yes"}, "'choice' must be a non-empty list of strings"),
        ({"choice": ["a", 1]}, "'choice' must be a non-empty list of strings"),
        ({"disable_any_whitespace": "yes"}, "'disable_any_whitespace' must be true or false"),
        ("not json", "'structured_outputs' is not valid JSON"),
        ([1], "'structured_outputs' must be a JSON object"),
    ],
)
def test_malformed_constraints_name_what_is_wrong(value: object, fragment: str) -> None:
    with pytest.raises(StructuredOutputsError) as info:
        parse_structured_outputs("structured_outputs", value)
    assert fragment in str(info.value)
    assert str(info.value).startswith("structured outputs: ")
    # The gateway turns every such message into a 400 on the field the client used for it.
    error = classify_stream_error(str(info.value))
    assert isinstance(error, InvalidRequestError) and error.param == "response_format"
