"""OpenAI's deprecated ``functions`` / ``function_call``, still sent by older LangChain and
LlamaIndex code: read as ``tools`` / ``tool_choice`` (the functions reach the prompt), answered in
the deprecated shape (``message.function_call``, ``finish_reason: "function_call"``, streamed
``delta.function_call``), through a real Triton with the scripted model (hermes markup)."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import openai
import pytest

from tests.integration.conftest import GatewayProcess

FUNCTIONS = [
    {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
ECHO = "<script>" + json.dumps({"echo_inputs": True}) + "</script>"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def script(text: str) -> str:
    pieces = [text[:20], text[20:]]
    responses: list[dict[str, Any]] = [{"text": [base64.b64encode(p.encode()).decode()]} for p in pieces]
    return "<script>" + json.dumps({"responses": responses}) + "</script>"


def body(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "scripted", "messages": [{"role": "user", "content": content}], "functions": FUNCTIONS, **extra}


def test_the_functions_reach_the_prompt_as_tools(gateway: GatewayProcess) -> None:
    reply = httpx.post(gateway.url + "/v1/chat/completions", json=body(ECHO), timeout=30).json()
    prompt = json.loads(reply["choices"][0]["message"]["content"])["text_input"]
    assert "<tools>" in prompt and '"get_weather"' in prompt


def test_a_call_is_answered_as_function_call(gateway: GatewayProcess) -> None:
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body(script(CALL)), timeout=30)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "function_call"
    assert choice["message"]["tool_calls"] is None and choice["message"]["content"] is None
    assert choice["message"]["function_call"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def test_a_streamed_call_is_function_call_deltas(gateway: GatewayProcess) -> None:
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as client:
        chunks = list(client.chat.completions.create(**body(script(CALL)), stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [d.function_call for d in deltas if d.function_call is not None]
    assert calls[0].name == "get_weather"
    assert "".join(c.arguments or "" for c in calls) == '{"city": "Paris"}'
    assert all(d.tool_calls is None for d in deltas)
    assert chunks[-1].choices[0].finish_reason == "function_call"


def test_a_named_function_call_is_forced(gateway: GatewayProcess) -> None:
    forced = body(script('{"city": "Oslo"}'), function_call={"name": "get_weather"})
    choice = httpx.post(gateway.url + "/v1/chat/completions", json=forced, timeout=30).json()["choices"][0]
    assert choice["message"]["function_call"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert choice["finish_reason"] == "stop"  # as a forced named tool choice ends


def test_function_call_none_answers_in_text(gateway: GatewayProcess) -> None:
    reply = httpx.post(gateway.url + "/v1/chat/completions", json=body(script(CALL), function_call="none"), timeout=30)
    choice = reply.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"].get("function_call") is None
    assert "get_weather" in choice["message"]["content"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "function", "function": FUNCTIONS[0]}]}, "functions"),
        ({"functions": []}, "functions"),
        ({"function_call": "required"}, "function_call"),
        ({"functions": None, "function_call": "auto"}, "function_call"),
    ],
)
def test_bad_legacy_fields_are_400s_naming_them(gateway: GatewayProcess, extra: dict[str, Any], param: str) -> None:
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body("hi", **extra), timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
