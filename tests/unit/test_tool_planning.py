"""Tool calling, planned (``plan/tools.py``) and read back per choice (``core/toolcalls.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.backend.contracts import build_contract
from gateway.backend.types import ModelInterface, TensorSpec
from gateway.core.generation_plan import FORCED_NAMED, FORCED_REQUIRED, ToolPlan
from gateway.core.toolcalls import ToolCallOut, ToolCallReader
from gateway.errors import InvalidRequestError
from gateway.models.catalog import ServedModel
from gateway.plan.chat import to_template_messages
from gateway.plan.requests import ChatCompletionRequest
from gateway.plan.tools import plan_tools
from gateway.tools.params import ParamType
from gateway.tools.schemas import named_call_schema, required_calls_schema

TOOLS = [
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {}}}}},
    {"type": "function", "function": {"name": "g"}},
]
HERMES = ServedModel(name="m", tool_parser="hermes")
NO_PARSER = ServedModel(name="plain")


def _ensemble(name: str, *inputs: str, step: ModelInterface | None = None) -> ServedModel:
    """A TensorRT-LLM ensemble declaring ``text_input``, ``max_tokens`` and ``inputs`` (BYTES);
    ``step``: its ``tensorrt_llm`` model, where served."""
    specs = {n: TensorSpec(n, "BYTES", (1,), n != "text_input") for n in ("text_input", *inputs)}
    specs["max_tokens"] = TensorSpec("max_tokens", "INT32", (1,))
    interface = ModelInterface(specs, max_batch_size=8, platform="ensemble")
    return ServedModel(
        name=name, tool_parser="hermes", layout="ensemble", contract=build_contract("ensemble", interface, step=step)
    )


TRTLLM = _ensemble("ens")
"""An ensemble without guided decoding (before v0.19): it cannot enforce a schema."""
GUIDE_INPUTS = ("guided_decoding_guide_type", "guided_decoding_guide")
TRTLLM_GUIDED = _ensemble("ens-guided", *GUIDE_INPUTS)
TRTLLM_NO_BACKEND = _ensemble("ens-no-backend", *GUIDE_INPUTS, step=ModelInterface(parameters={}))
"""Declares the guide inputs, but its tensorrt_llm step sets no guided_decoding_backend."""


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, **fields}
    )


def refusal(body: ChatCompletionRequest, model: ServedModel) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        plan_tools(body, model)
    return info.value


def test_auto_is_the_default_and_uses_the_models_parser() -> None:
    decision = plan_tools(chat(), HERMES)
    assert decision.plan == ToolPlan("hermes", frozenset({"f", "g"}), parallel=True)
    assert decision.template_tools is not None and [t["function"]["name"] for t in decision.template_tools] == [
        "f",
        "g",
    ]
    assert decision.structured is None


def test_a_typed_format_gets_the_parameter_types_and_the_plan_stays_hashable() -> None:
    """Qwen3-Coder's values are bare text: the reader types them by the request's schemas."""
    tools = [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        },
        {"type": "function", "function": {"name": "g"}},
    ]
    decision = plan_tools(chat(tools=tools), ServedModel(name="m", tool_parser="qwen3_coder"))
    assert decision.plan is not None and decision.plan.params == (("f", (("n", ParamType("integer", False)),)),)
    hash(decision.plan)
    reader = ToolCallReader(decision.plan)
    content, calls, _ = reader.read(
        "<tool_call>\n<function=f>\n<parameter=n>\n7\n</parameter>\n</function>\n</tool_call>", "stop"
    )
    assert content == "" and calls is not None and [c.name for c in calls if c.opens] == ["f"]
    assert "".join(c.arguments for c in calls) == '{"n": 7}'


def test_auto_without_a_parser_is_a_400_that_says_how_to_set_one() -> None:
    error = refusal(chat(), NO_PARSER)
    assert error.param == "tool_choice" and "tool_call_parser" in error.message and "plain" in error.message


def test_none_renders_the_tools_unless_the_model_says_not_to() -> None:
    assert plan_tools(chat(tool_choice="none"), NO_PARSER).template_tools is not None
    assert plan_tools(chat(tool_choice="none"), NO_PARSER).plan is None
    excluding = ServedModel(name="m", exclude_tools_when_none=True)
    assert plan_tools(chat(tool_choice="none"), excluding).template_tools is None


def test_required_forces_an_array_of_calls_and_named_the_functions_parameters() -> None:
    required = plan_tools(chat(tool_choice="required"), NO_PARSER)  # no parser needed when forced
    assert required.plan is not None and required.plan.parser == FORCED_REQUIRED
    assert required.structured is not None and required.structured["minItems"] == 1
    assert "maxItems" not in required.structured
    single = plan_tools(chat(tool_choice="required", parallel_tool_calls=False), NO_PARSER)
    assert single.structured is not None and single.structured["maxItems"] == 1
    named = plan_tools(chat(tool_choice={"type": "function", "function": {"name": "g"}}), NO_PARSER)
    assert named.plan is not None and named.plan.parser == FORCED_NAMED and named.plan.forced_name == "g"
    assert named.structured == {"type": "object", "properties": {}}


def test_forced_call_schemas_close_objects_that_are_silent_on_other_keys() -> None:
    """A small model under an open schema adds key after key until max_tokens cuts the call."""
    parameters = {
        "type": "object",
        "properties": {
            "where": {"type": "object", "properties": {"city": {"type": "string"}}},
            "tags": {"type": "array", "items": {"type": "object", "properties": {"t": {}}}},
            "extra": {"type": "object", "properties": {}, "additionalProperties": {"type": "integer"}},
            "either": {"anyOf": [{"type": "object", "properties": {"a": {}}}, {"type": "null"}]},
            "both": {"allOf": [{"type": "object", "properties": {"a": {}}}, {"properties": {"b": {}}}]},
        },
        "$defs": {"Node": {"type": "object", "properties": {"n": {}}}},
    }
    original = json.dumps(parameters, sort_keys=True)
    schema = named_call_schema(parameters)
    assert json.dumps(parameters, sort_keys=True) == original, "the caller's schema is not changed"
    props = schema["properties"]
    assert schema["additionalProperties"] is False
    assert props["where"]["additionalProperties"] is False
    assert props["tags"]["items"]["additionalProperties"] is False
    assert props["extra"]["additionalProperties"] == {"type": "integer"}, "an explicit rule stays"
    assert props["either"]["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in props["both"]["allOf"][0], "closing one allOf branch refuses the other"
    assert schema["$defs"]["Node"]["additionalProperties"] is False
    required = required_calls_schema([("f", parameters)])
    assert required["items"]["anyOf"][0]["properties"]["parameters"] == schema


def test_forcing_needs_a_backend_that_enforces_schemas() -> None:
    refused = refusal(chat(tool_choice="required"), TRTLLM)
    assert refused.param == "tool_choice"
    assert "TensorRT-LLM ensemble" in refused.message
    assert refusal(chat(tool_choice="required"), TRTLLM_NO_BACKEND).param == "tool_choice"
    # An ensemble that declares guided decoding enforces the schema like vLLM does.
    assert plan_tools(chat(tool_choice="required"), TRTLLM_GUIDED) == plan_tools(chat(tool_choice="required"), HERMES)


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "g"}}], ids=["required", "named"]
)
def test_a_forced_choice_beside_a_response_format_is_constrained_by_the_calls_schema(choice: object) -> None:
    alone = plan_tools(chat(tool_choice=choice), HERMES)
    both = plan_tools(chat(tool_choice=choice, response_format={"type": "json_object"}), HERMES)
    assert both == alone


def test_history_arguments_reach_the_template_as_objects() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    body = chat(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call]}])
    messages = to_template_messages(body)
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    broken = {**call, "function": {"name": "f", "arguments": "{nope"}}
    with pytest.raises(InvalidRequestError) as info:
        to_template_messages(chat(messages=[{"role": "assistant", "tool_calls": [broken]}]))
    assert info.value.param == "messages.0.tool_calls.0.function.arguments"


def joined(pieces: list[ToolCallOut]) -> list[ToolCallOut]:
    """Calls out of their pieces, as a client assembles them by index; each piece after the
    first keeps its call's index, id and name."""
    calls: dict[int, ToolCallOut] = {}
    for piece in pieces:
        if piece.opens:
            assert piece.index not in calls
            calls[piece.index] = piece._replace(closes=True)
        else:
            first = calls[piece.index]
            assert (piece.id, piece.name) == (first.id, first.name)
            calls[piece.index] = first._replace(arguments=first.arguments + piece.arguments)
    return [calls[i] for i in sorted(calls)]


def test_a_reader_numbers_calls_gives_unique_ids_and_reports_tool_calls() -> None:
    reader = ToolCallReader(ToolPlan("hermes", frozenset({"f", "g"}), parallel=True))
    calls = []
    text = 'hi <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call><tool_call>{"name": "g", "arguments": {}}</tool_call>'
    content = ""
    for piece in (text[:10], text[10:40], text[40:]):
        shown, made, finish = reader.read(piece, None)
        content += shown
        calls.extend(made or ())
        assert finish is None
    shown, made, finish = reader.read("", "stop")
    assert content + shown == "hi " and not made and finish == "tool_calls"
    calls = joined(calls)
    assert [(c.index, c.name, json.loads(c.arguments)) for c in calls] == [(0, "f", {"a": 1}), (1, "g", {})]
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)


def test_parallel_false_keeps_one_call_and_length_stays_length() -> None:
    reader = ToolCallReader(ToolPlan("hermes", frozenset({"f", "g"}), parallel=False))
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "g", "arguments": {}}</tool_call>'
    _, made, finish = reader.read(text, "length")
    assert [c.name for c in joined(list(made or ()))] == ["f"] and finish == "length"


def test_a_forced_named_call_finishes_with_stop() -> None:
    reader = ToolCallReader(ToolPlan(FORCED_NAMED, frozenset({"f"}), parallel=True, forced_name="f"))
    shown, made, finish = reader.read('{"a": 2}', "stop")
    assert shown == "" and [c.name for c in made or () if c.opens] == ["f"] and finish == "stop"
    assert "".join(c.arguments for c in made or ()) == '{"a": 2}' and len({c.id for c in made or ()}) == 1
