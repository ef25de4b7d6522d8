"""The Vercel AI SDK (npm ``ai`` with ``@ai-sdk/openai``, Node.js): its default provider,
``openai(model)``, speaks the Responses API with the store on; ``@ai-sdk/openai-compatible``
reads a reasoning model's chat completions, for a model served with each reasoning parser.

``node/vercel.mjs`` runs each case through the SDK and prints what it returned and every request
it sent (a fetch wrapper records them); each test here reads one case.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.client_lane.common import (
    ANSWER,
    MODEL,
    REASONING_OUTPUTS,
    THINKING_SWITCHES,
    THOUGHT,
    Forecast,
    check_weather_call,
    reasoning_model,
    reasoning_tokens,
    thinking_prompt,
)

NODE_DIR = Path(__file__).resolve().parent / "node"
THINKERS = [
    {
        "parser": parser,
        "model": reasoning_model(parser),
        "prompt": thinking_prompt(parser),
        "body": {"chat_template_kwargs": THINKING_SWITCHES[parser]} if parser in THINKING_SWITCHES else None,
    }
    for parser in sorted(REASONING_OUTPUTS)
]


@pytest.fixture(scope="module")
def report(base_url: str) -> dict[str, Any]:
    done = subprocess.run(
        ["node", "vercel.mjs", base_url, MODEL, json.dumps(THINKERS)],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if not done.stdout.strip():
        pytest.fail(f"vercel.mjs exited with {done.returncode} and printed nothing:\n{done.stderr}")
    return dict(json.loads(done.stdout))


def _case(report: dict[str, Any], name: str) -> dict[str, Any]:
    case = report[name]
    assert case["ok"], (
        f"{case['error']} (status {case['status']}, body {case['responseBody']}); requests: {json.dumps(case['requests'])}"
    )
    assert [request["status"] for request in case["requests"]] == [200] * len(case["requests"])
    return dict(case)


def test_two_turns_send_the_first_answer_back_as_an_item_reference(report: dict[str, Any]) -> None:
    case = _case(report, "two_turns")
    first, second = case["requests"]
    assert all(item.get("type") != "item_reference" for item in first["body"]["input"])
    references = [item["id"] for item in second["body"]["input"] if item.get("type") == "item_reference"]
    assert references == [item["id"] for item in first["response"]["output"]]
    assert second["response"]["status"] in {"completed", "incomplete"}


def test_a_required_tool_choice_calls_the_tool(report: dict[str, Any]) -> None:
    case = _case(report, "required_tool")
    (request,) = case["requests"]
    assert request["body"]["tool_choice"] == "required"
    calls = case["result"]["toolCalls"]
    assert calls and case["result"]["finishReason"] == "tool-calls"
    for call in calls:
        check_weather_call(call["toolName"], call["input"])
    assert case["result"]["toolResults"] == len(calls)


def test_generate_object_validates_into_the_schema(report: dict[str, Any]) -> None:
    case = _case(report, "generate_object")
    (request,) = case["requests"]
    assert request["body"]["text"]["format"]["type"] == "json_schema"
    Forecast.model_validate(case["result"]["object"])


def test_a_named_tool_choice_beside_a_structured_output(report: dict[str, Any]) -> None:
    case = _case(report, "tool_and_output")
    forced, answer = (request["body"] for request in case["requests"])
    assert forced["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert forced["text"]["format"]["type"] == "json_schema"
    assert answer["tool_choice"] == "none"
    (call,) = case["result"]["toolCalls"]
    check_weather_call(call["toolName"], call["input"])
    Forecast.model_validate(case["result"]["output"])


@pytest.mark.parametrize("parser", sorted(REASONING_OUTPUTS))
def test_a_reasoning_models_thinking_reaches_the_sdk_apart_from_its_answer(report: dict[str, Any], parser: str) -> None:
    result = _case(report, "reasoning")["result"][parser]
    spent = reasoning_tokens(parser)
    assert result["whole"] == {"text": ANSWER, "reasoning": THOUGHT, "reasoningTokens": spent}
    assert result["streamed"] == {"text": ANSWER, "reasoning": THOUGHT}
    if parser in THINKING_SWITCHES:  # its switch is a template variable, which the Responses API lacks
        assert result["responses"] is None
    else:
        assert result["responses"] == {"text": ANSWER, "reasoningTokens": spent}
