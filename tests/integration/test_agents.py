"""Agent clients on the quickstart model: forced tool calls and structured outputs from tiny-llm.

tiny-llm's weights are random, so everything valid here is valid because it was enforced while
the model generated (the reference model masks logits with a grammar): a forced tool choice
returns a call whose arguments fit the function's schema, and structured outputs parse, every
run. The clients are the real ones users run: the official SDK's ``parse`` and LangChain.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import jsonschema
import openai
import pytest
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from tests.integration.conftest import GatewayProcess

MODEL = "tiny-llm"
WEATHER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMETERS}}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}},
            "required": ["tz"],
            "additionalProperties": False,
        },
    },
}
SCHEMAS = {"get_weather": WEATHER_PARAMETERS, "get_time": TIME_TOOL["function"]["parameters"]}


class Forecast(BaseModel):
    """A forecast."""

    city: Literal["Paris", "Tokyo", "Lima"]
    sunny: bool
    days: int = Field(ge=1, le=7)


@pytest.fixture(scope="module")
def chat_model(gateway: GatewayProcess) -> Iterator[ChatOpenAI]:
    yield ChatOpenAI(
        model=MODEL, base_url=gateway.url + "/v1", api_key="unused", max_retries=0, max_tokens=96, temperature=1.0
    )


def _ask(content: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


@pytest.mark.parametrize("stream", [False, True])
def test_a_named_tool_choice_returns_a_valid_call_every_time(client: openai.OpenAI, stream: bool) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    for seed in range(5):
        kwargs: dict[str, Any] = {
            "model": MODEL,
            "messages": _ask("Weather?"),
            "tools": [WEATHER_TOOL, TIME_TOOL],
            "tool_choice": named,
            "seed": seed,
            "max_tokens": 96,
        }
        if stream:
            with client.chat.completions.stream(**kwargs) as events:
                message = events.get_final_completion().choices[0].message
        else:
            message = client.chat.completions.create(**kwargs).choices[0].message
        (call,) = message.tool_calls or ()
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER_PARAMETERS)


def test_required_returns_valid_calls_of_the_given_tools(client: openai.OpenAI) -> None:
    # parallel_tool_calls false bounds the array to one call: with several allowed, the random
    # model may keep adding calls until max_tokens (valid calls, but an array cut short).
    for seed in range(5):
        reply = client.chat.completions.create(
            model=MODEL,
            messages=_ask("Anything"),
            tools=[WEATHER_TOOL, TIME_TOOL],
            tool_choice="required",
            parallel_tool_calls=False,
            seed=seed,
            max_tokens=160,
        )
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert choice.message.tool_calls
        for call in choice.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_sdk_parse_returns_the_pydantic_model(client: openai.OpenAI) -> None:
    for seed in range(5):
        reply = client.chat.completions.parse(
            model=MODEL, messages=_ask("Forecast?"), response_format=Forecast, seed=seed, max_tokens=96
        )
        assert isinstance(reply.choices[0].message.parsed, Forecast)


def test_langchain_bind_tools_with_a_forced_tool(chat_model: ChatOpenAI) -> None:
    bound = chat_model.bind_tools([WEATHER_TOOL, TIME_TOOL], tool_choice="get_time")
    message = bound.invoke("What time is it?")
    assert isinstance(message, AIMessage)
    (call,) = message.tool_calls
    assert call["name"] == "get_time" and call["id"] and call["id"].startswith("call_")
    jsonschema.validate(call["args"], SCHEMAS["get_time"])


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_langchain_with_structured_output(chat_model: ChatOpenAI, method: str) -> None:
    # strict: LangChain closes the schema (additionalProperties false); an open schema lets the
    # random model add keys of its own until max_tokens, as it would on vLLM.
    structured = chat_model.with_structured_output(Forecast, method=method, strict=True)  # type: ignore[arg-type]
    for _ in range(3):
        assert isinstance(structured.invoke("Forecast?"), Forecast)


def test_langchain_with_structured_output_json_mode(gateway: GatewayProcess) -> None:
    # json_mode asks for any JSON object (response_format json_object), which LangChain parses.
    # Any object allows strings of any length, and the random model writes long ones: a bias
    # towards '"' and '}' (token ids 6 and 97 in tiny-llm's vocabulary) lets it close them. The
    # seed makes the draw the same every run: unseeded, a draw now and then still ran to
    # max_tokens inside a string, which LangChain reports as a length error.
    model = ChatOpenAI(
        model=MODEL,
        base_url=gateway.url + "/v1",
        api_key="unused",
        max_retries=0,
        max_tokens=256,
        logit_bias={6: 4, 97: 4},
        seed=11,
    )
    structured = model.with_structured_output(method="json_mode")
    for _ in range(3):
        assert isinstance(structured.invoke("Answer in JSON."), dict)
