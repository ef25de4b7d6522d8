"""Tool-call arguments stream through the real Triton path, in every family of formats.

The scripted model replays a model's output a few bytes per response (so markup, JSON escapes
and UTF-8 characters are cut anywhere), and the openai SDK streams the chat completion: each
call's arguments must arrive over several chunks, as the model writes them, and join to exactly
the arguments of the same answer not streamed, which parse to the expected object.
Each parser gets its own gateway (``model_files`` picks it for the scripted model); the forced
calls run on the default gateway, since ``tool_choice`` picks their parser.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway

SCRIPTED = "scripted"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
CITY = 'Zürich 東京 🙂, "the old town", a\\b, then a second line:\nand <b>more</b> [text] {here}; ' * 2
WEATHER = {"city": CITY, "days": 3}
TIME: dict[str, Any] = {}
PIECE = 5
"""Bytes per scripted response: a dozen and more responses for each call's arguments."""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _qwen_param(key: str, value: Any) -> str:
    return f"<parameter={key}>\n{value}\n</parameter>\n"


# parser → (model output, expected content, expected calls)
OUTPUTS: dict[str, tuple[str, str, list[tuple[str, dict[str, Any]]]]] = {
    "mistral": (
        "[TOOL_CALLS]get_weather[ARGS]" + json.dumps(WEATHER) + "[TOOL_CALLS]get_time[ARGS]{}",
        "",
        [("get_weather", WEATHER), ("get_time", TIME)],
    ),
    "llama3_json": (
        "<|python_tag|>" + json.dumps({"name": "get_weather", "parameters": WEATHER}, indent=2),
        "",
        [("get_weather", WEATHER)],
    ),
    "qwen3_coder": (
        "Checking.\n<tool_call>\n<function=get_weather>\n"
        + _qwen_param("city", CITY)
        + _qwen_param("days", 3)
        + "</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
        "Checking.\n",
        [("get_weather", WEATHER), ("get_time", TIME)],
    ),
    "glm45": (
        f"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>{CITY.strip()}</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
        "",
        [("get_weather", {"city": CITY.strip(), "days": 3})],
    ),
    "pythonic": (
        f"[get_weather(city={CITY!r}, days=3), get_time()]",
        "",
        [("get_weather", WEATHER), ("get_time", TIME)],
    ),
}
FORCED: dict[str, tuple[str, dict[str, Any], list[tuple[str, dict[str, Any]]], str]] = {
    "named": (
        json.dumps(WEATHER),
        {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        [("get_weather", WEATHER)],
        "stop",  # OpenAI's finish reason for a forced function
    ),
    "required": (
        json.dumps([{"name": "get_weather", "parameters": WEATHER}, {"name": "get_time", "parameters": {}}]),
        {"tool_choice": "required"},
        [("get_weather", WEATHER), ("get_time", TIME)],
        "tool_calls",
    ),
}
"""choice → (the model's output, the request's extra fields, expected calls, finish reason)."""


def script(output: str) -> str:
    """The scripted reply: ``output``'s bytes, ``PIECE`` per response."""
    data = output.encode()
    responses = [{"text": [base64.b64encode(data[i : i + PIECE]).decode()]} for i in range(0, len(data), PIECE)]
    return "<script>" + json.dumps({"responses": responses}) + "</script>"


def messages(output: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": script(output)}]


def stream_calls(client: openai.OpenAI, output: str, extra: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """(the streamed content, per call: its name, its argument deltas, and the chunk each came in)."""
    stream = client.chat.completions.create(
        model=SCRIPTED, messages=messages(output), tools=TOOLS, stream=True, **extra
    )
    content, calls = "", {}
    for number, chunk in enumerate(stream):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for part in choice.delta.tool_calls or ():
                call = calls.setdefault(part.index, {"name": None, "deltas": [], "chunks": []})
                function = part.function
                if function is not None and function.name:
                    assert call["name"] is None and part.id, part
                    call["name"] = function.name
                if function is not None and function.arguments:
                    call["deltas"].append(function.arguments)
                    call["chunks"].append(number)
    assert sorted(calls) == list(range(len(calls)))
    return content, [calls[index] for index in sorted(calls)]


def check(
    client: openai.OpenAI,
    output: str,
    content: str,
    expected: list[Any],
    extra: dict[str, Any],
    finish: str = "tool_calls",
) -> None:
    whole = client.chat.completions.create(model=SCRIPTED, messages=messages(output), tools=TOOLS, **extra).choices[0]
    assert (whole.message.content or "") == content
    assert whole.finish_reason == finish
    final = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or ()]
    assert [(name, json.loads(arguments)) for name, arguments in final] == expected
    streamed_content, calls = stream_calls(client, output, extra)
    assert streamed_content == content
    assert [(call["name"], "".join(call["deltas"])) for call in calls] == final  # byte for byte
    for call, (_, arguments) in zip(calls, expected, strict=True):
        if arguments:  # a call with arguments to stream: they came over several chunks
            assert len(call["deltas"]) >= 5 and len(set(call["chunks"])) >= 5, call


@pytest.fixture(scope="module", params=sorted(OUTPUTS))
def parser_client(
    request: pytest.FixtureRequest, triton: TritonServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, openai.OpenAI]]:
    name = request.param
    settings = json.dumps({SCRIPTED: {"tool_call_parser": name}})
    log = tmp_path_factory.mktemp(f"gateway-{name}") / "gateway.log"
    process: GatewayProcess = start_gateway(triton.grpc_url, log, env={"GATEWAY_MODEL_FILES": settings})
    with openai.OpenAI(base_url=process.url + "/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
        yield name, sdk
    stop_gateway(process)


def test_each_format_streams_its_arguments_over_many_chunks(parser_client: tuple[str, openai.OpenAI]) -> None:
    name, client = parser_client
    output, content, expected = OUTPUTS[name]
    check(client, output, content, expected, {})


@pytest.mark.parametrize("choice", sorted(FORCED))
def test_forced_calls_stream_their_arguments_over_many_chunks(client: openai.OpenAI, choice: str) -> None:
    output, extra, expected, finish = FORCED[choice]
    check(client, output, "", expected, extra, finish)
