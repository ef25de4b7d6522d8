"""Parameter types from schemas, and bare-text values typed by them (``gateway/tools/params.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.tools.params import (
    BOOLEAN,
    CONTAINER,
    INTEGER,
    NUMBER,
    OTHER,
    STRING,
    ParamType,
    glm_value,
    param_type,
    qwen3_value,
    tool_params,
)


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, ParamType(STRING, False)),
        ({"type": "integer"}, ParamType(INTEGER, False)),
        ({"type": "int64"}, ParamType(INTEGER, False)),
        ({"type": "number"}, ParamType(NUMBER, False)),
        ({"type": "float"}, ParamType(NUMBER, False)),
        ({"type": "boolean"}, ParamType(BOOLEAN, False)),
        ({"type": "object"}, ParamType(CONTAINER, False)),
        ({"type": "array", "items": {}}, ParamType(CONTAINER, False)),
        ({"type": "null"}, ParamType(OTHER, True)),
        ({"type": ["integer", "null"]}, ParamType(INTEGER, True)),
        ({"anyOf": [{"type": "null"}, {"type": "number"}]}, ParamType(NUMBER, True)),
        ({"anyOf": [{"$ref": "#/x"}]}, ParamType(STRING, False)),
        ({"enum": ["a", "b"]}, ParamType(STRING, False)),
        ({}, ParamType(STRING, False)),
        ({"type": "tuple"}, ParamType(OTHER, False)),
    ],
)
def test_param_type_reads_the_schema_as_vllm_does(schema: dict[str, Any], expected: ParamType) -> None:
    assert param_type(schema) == expected


def test_tool_params_leave_out_tools_without_properties_and_are_hashable() -> None:
    params = tool_params(
        [("f", {"type": "object", "properties": {"n": {"type": "integer"}}}), ("g", None), ("h", {"type": "object"})]
    )
    assert params == (("f", (("n", ParamType(INTEGER, False)),)),)
    hash(params)


STR, INT, NUM, BOOL, CONT, ANY = (
    ParamType(kind, False) for kind in (STRING, INTEGER, NUMBER, BOOLEAN, CONTAINER, OTHER)
)


@pytest.mark.parametrize(
    ("text", "declared", "value"),
    [
        ("42", STR, "42"),  # a string stays a string, however it looks
        ("null", STR, "null"),
        ("None", ParamType(STRING, True), None),
        ("42", None, "42"),  # not in the schema: text
        ("42", INT, 42),
        ("-7", INT, -7),
        ("4.5", INT, "4.5"),  # not an integer: the text
        ("NULL", INT, None),
        ("2.5", NUM, 2.5),
        ("3.0", NUM, 3),  # whole numbers as integers, as vLLM sends them
        ("1e400", NUM, "1e400"),  # no finite float: the text
        ("nan", NUM, "nan"),
        ("abc", NUM, "abc"),
        ("true", BOOL, True),
        ("False", BOOL, False),
        ("yes", BOOL, "yes"),  # vLLM would say false; the model's text is kept
        ('{"a": [1, null]}', CONT, {"a": [1, None]}),
        ("{'a': None}", CONT, {"a": None}),  # Python spelling
        ("\"{'a': 1}\"", CONT, {"a": 1}),  # a JSON string holding a Python literal
        ("[1, 2", CONT, "[1, 2"),
        ("(1, 2)", CONT, "(1, 2)"),  # a tuple is not JSON
        ("[1, 'x']", ANY, [1, "x"]),
        ("hello", ANY, "hello"),
        ("none", ANY, None),
    ],
)
def test_qwen3_values_are_typed_by_the_schema(text: str, declared: ParamType | None, value: Any) -> None:
    assert qwen3_value(text, declared) == value
    assert type(qwen3_value(text, declared)) is type(value)


@pytest.mark.parametrize(
    ("text", "declared", "value"),
    [
        ("42", STR, "42"),
        ("42", None, 42),  # not in the schema: JSON when it parses, as vLLM's glm45
        ("42", INT, 42),
        ("true", BOOL, True),
        ('{"a": 1}', CONT, {"a": 1}),
        ("{'a': 1}", CONT, {"a": 1}),
        ("Paris", None, "Paris"),
        ("null", ANY, None),
        ("[1,", CONT, "[1,"),
    ],
)
def test_glm_values_are_json_unless_declared_strings(text: str, declared: ParamType | None, value: Any) -> None:
    assert glm_value(text, declared) == value
