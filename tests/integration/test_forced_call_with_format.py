"""A forced tool choice beside a response format, as agent frameworks send them on every turn
(the OpenAI Agents SDK, the Vercel AI SDK, instructor's RESPONSES_TOOLS): accepted on both APIs;
the forced turn is constrained by the call's schema alone. The scripted model echoes what it was
sent, and the forced call's arguments are that echo."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.integration.conftest import GatewayProcess

ECHO = "<script>" + json.dumps({"echo_inputs": True}) + "</script>"
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}}
CLOSED = {**PARAMETERS, "additionalProperties": False}
"""What the forced call is constrained by: its parameters, closed (``gateway.tools.schemas.closed``)."""
FORMAT_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def sent_constraint(arguments: str) -> Any:
    return json.loads(json.loads(arguments)["sampling_parameters"]["structured_outputs"])


def test_chat_accepts_a_forced_choice_with_a_response_format(gateway: GatewayProcess) -> None:
    """Named here; ``required`` is planned the same way (its array schema in the format's place:
    ``tests/unit/test_tool_planning.py``), but the echo is no array of calls to read back."""
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": ECHO}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": FORMAT_SCHEMA}},
    }
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    [call] = response.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert sent_constraint(call["function"]["arguments"]) == {"json": CLOSED}


def test_responses_accepts_a_forced_choice_with_a_text_format(gateway: GatewayProcess) -> None:
    body = {
        "model": "scripted",
        "input": ECHO,
        "store": False,
        "tools": [{"type": "function", "name": "get_weather", "parameters": PARAMETERS}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "text": {"format": {"type": "json_schema", "name": "out", "schema": FORMAT_SCHEMA}},
    }
    response = httpx.post(gateway.url + "/v1/responses", json=body, timeout=30)
    assert response.status_code == 200, response.text
    [call] = [item for item in response.json()["output"] if item["type"] == "function_call"]
    assert call["name"] == "get_weather"
    assert sent_constraint(call["arguments"]) == {"json": CLOSED}


def test_a_text_turn_keeps_the_format(gateway: GatewayProcess) -> None:
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": ECHO}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}],
        "tool_choice": "none",
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": FORMAT_SCHEMA}},
    }
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    echoed = json.loads(response.json()["choices"][0]["message"]["content"])
    assert json.loads(echoed["sampling_parameters"]["structured_outputs"]) == {"json": FORMAT_SCHEMA}
