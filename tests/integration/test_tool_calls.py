"""Tool calling through the real Triton path: the scripted model replays what a model of each
family emits, and the gateway must turn it into OpenAI's ``tool_calls``, streamed and not.

Every parser gets its own gateway (the ``model_files`` setting picks it for the scripted model;
the default gateway detects ``hermes`` from tiny-llm's template). Each case is streamed once per
byte position, cut into two responses there, so markup split inside a tag, inside the JSON or
inside a multi-byte character must never leak into ``content``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
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
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}},
    },
]
ECHO = "<script>" + json.dumps({"echo_inputs": True}) + "</script>"
"""The scripted model echoes what it received (the tags keep the script apart from the tools' JSON)."""
WEATHER = {"city": "Zürich 東京 🙂", "unit": "c"}
TIME = {"tz": "Europe/Paris"}


def _call(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return (name, arguments)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# parser → (model output, expected content, expected calls)
CASES: dict[str, tuple[str, str, list[tuple[str, dict[str, Any]]]]] = {
    "hermes": (
        "Checking both. <tool_call>\n"
        + _dumps({"name": "get_weather", "arguments": WEATHER})
        + "\n</tool_call>\n<tool_call>\n"
        + _dumps({"name": "get_time", "arguments": TIME})
        + "\n</tool_call>",
        "Checking both. ",
        [_call("get_weather", WEATHER), _call("get_time", TIME)],
    ),
    "llama3_json": (
        "<|python_tag|>"
        + _dumps({"name": "get_weather", "parameters": WEATHER})
        + "; "
        + _dumps({"name": "get_time", "parameters": TIME}),
        "",
        [_call("get_weather", WEATHER), _call("get_time", TIME)],
    ),
    "mistral": (
        "[TOOL_CALLS]"
        + _dumps([{"name": "get_weather", "arguments": WEATHER}, {"name": "get_time", "arguments": TIME}]),
        "",
        [_call("get_weather", WEATHER), _call("get_time", TIME)],
    ),
    "pythonic": (
        '[get_weather(city="Zürich 東京 🙂", unit="c"), get_time(tz="Europe/Paris")]',
        "",
        [_call("get_weather", WEATHER), _call("get_time", TIME)],
    ),
    "qwen3_coder": (
        "Checking both.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nZürich 東京 🙂\n</parameter>\n"
        "<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
        "<parameter=tz>\nEurope/Paris\n</parameter>\n</function>\n</tool_call>",
        "Checking both.\n",
        [_call("get_weather", WEATHER), _call("get_time", TIME)],
    ),
    "glm45": (
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Zürich 東京 🙂</arg_value>\n"
        "<arg_key>unit</arg_key>\n<arg_value>c</arg_value>\n</tool_call>"
        "<tool_call>get_time<arg_key>tz</arg_key><arg_value>Europe/Paris</arg_value></tool_call>",
        "",
        [_call("get_weather", WEATHER), _call("get_time", TIME)],
    ),
    "deepseek_v31": (
        "Checking both.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        + _dumps(WEATHER)
        + "<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>"
        + _dumps(TIME)
        + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "Checking both.",
        [_call("get_weather", WEATHER), _call("get_time", TIME)],
    ),
    "kimi_k2": (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        + _dumps(WEATHER)
        + "<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>"
        + _dumps(TIME)
        + "<|tool_call_end|><|tool_calls_section_end|>",
        "",
        [_call("get_weather", WEATHER), _call("get_time", TIME)],
    ),
}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def script(pieces: list[bytes], finish: str = "stop", **extra: Any) -> str:
    """A scripted reply: one response per piece, the last one finishing with ``finish``."""
    responses: list[dict[str, Any]] = [{"text": [b64(piece)]} for piece in pieces]
    responses[-1]["finish_reason"] = [finish]
    return "<script>" + json.dumps({"responses": responses, **extra}) + "</script>"


def user(content: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


def streamed(gateway: GatewayProcess, body: dict[str, Any]) -> dict[str, Any]:
    """A raw SSE stream, folded as a careful client folds it; checks OpenAI's tool-call delta shape."""
    request = {"model": SCRIPTED, "stream": True, "tools": TOOLS, **body}
    content, finish = "", None
    calls: dict[int, dict[str, Any]] = {}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=request, timeout=30) as response:
        assert response.status_code == 200, response.read()
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        chunk = json.loads(line[len("data: ") :])
        assert "error" not in chunk, chunk
        (choice,) = chunk["choices"]
        delta = choice["delta"]
        content += delta.get("content") or ""
        for part in delta.get("tool_calls") or ():
            index = part["index"]
            if index not in calls:  # a call's first delta: index, id, type and name
                assert part["id"].startswith("call_") and part["type"] == "function", part
                calls[index] = {"id": part["id"], "name": part["function"]["name"], "arguments": ""}
            else:
                assert "id" not in part and "name" not in part["function"], part
            calls[index]["arguments"] += part["function"].get("arguments") or ""
        if choice["finish_reason"] is not None:
            finish = choice["finish_reason"]
    assert sorted(calls) == list(range(len(calls)))
    return {"content": content, "finish": finish, "calls": [calls[i] for i in sorted(calls)]}


def complete(client: openai.OpenAI, **body: Any) -> Any:
    return client.chat.completions.create(model=SCRIPTED, **{"tools": TOOLS, **body}).choices[0]


@pytest.fixture(scope="module", params=sorted(CASES))
def parser_gateway(
    request: pytest.FixtureRequest, triton: TritonServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, GatewayProcess]]:
    name = request.param
    settings = json.dumps({SCRIPTED: {"tool_call_parser": name}})
    log = tmp_path_factory.mktemp(f"gateway-{name}") / "gateway.log"
    process = start_gateway(triton.grpc_url, log, env={"GATEWAY_MODEL_FILES": settings})
    yield name, process
    stop_gateway(process)


def test_each_format_parses_at_every_split_streamed_and_not(parser_gateway: tuple[str, GatewayProcess]) -> None:
    name, gateway = parser_gateway
    output, content, calls = CASES[name]
    data = output.encode()
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as client:
        whole = complete(client, messages=user(script([data])))
    assert (whole.message.content or "") == content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in whole.message.tool_calls or ()] == calls
    assert whole.finish_reason == "tool_calls"
    ids = {c.id for c in whole.message.tool_calls or ()}
    assert len(ids) == len(calls) and all(i.startswith("call_") for i in ids)
    for cut in range(len(data) + 1):
        got = streamed(gateway, {"messages": user(script([data[:cut], data[cut:]]))})
        assert got["content"] == content, (cut, got)
        assert [(c["name"], c["arguments"]) for c in got["calls"]] == [
            (c.function.name, c.function.arguments) for c in whole.message.tool_calls or ()
        ], cut
        assert got["finish"] == "tool_calls", cut


def test_the_default_gateway_detects_hermes_from_tiny_llms_template(gateway: GatewayProcess) -> None:
    models = {m["id"]: m for m in httpx.get(gateway.url + "/v1/models", timeout=10).json()["data"]}
    assert models["tiny-llm"]["tool_call_parser"] == "hermes"
    assert models[SCRIPTED]["tool_call_parser"] == "hermes"


def test_text_then_a_call_streams_the_text_first(gateway: GatewayProcess) -> None:
    call = '<tool_call>{"name": "get_time", "arguments": {"tz": "UTC"}}</tool_call>'
    pieces = [b"The time ", b"is coming. ", call.encode()]
    got = streamed(gateway, {"messages": user(script(pieces))})
    assert got["content"] == "The time is coming. "
    assert [(c["name"], json.loads(c["arguments"])) for c in got["calls"]] == [("get_time", {"tz": "UTC"})]


def test_tool_choice_none_renders_the_tools_but_parses_nothing(client: openai.OpenAI) -> None:
    output = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    choice = complete(client, messages=user(script([output.encode()])), tool_choice="none")
    assert choice.message.content == output and not choice.message.tool_calls
    assert choice.finish_reason == "stop"
    echoed = complete(client, messages=user(ECHO), tool_choice="none")
    assert "<tools>" in json.loads(echoed.message.content)["text_input"]


def test_auto_is_the_default_with_tools(client: openai.OpenAI) -> None:
    output = '<tool_call>{"name": "get_time", "arguments": {"tz": "UTC"}}</tool_call>'
    choice = complete(client, messages=user(script([output.encode()])))
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls[0].function.name == "get_time"


def test_required_is_forced_with_vllms_array_schema(client: openai.OpenAI) -> None:
    echoed = complete(client, messages=user(ECHO), tool_choice="required")
    # The echo is one JSON object, not an array of calls: the forced reader gives it back as text.
    sent = json.loads(echoed.message.content)
    schema = json.loads(sent["sampling_parameters"]["structured_outputs"])["json"]
    assert schema["type"] == "array" and schema["minItems"] == 1
    names = [variant["properties"]["name"]["enum"] for variant in schema["items"]["anyOf"]]
    assert names == [["get_weather"], ["get_time"]]
    output = _dumps([{"name": "get_weather", "parameters": WEATHER}, {"name": "get_time", "parameters": TIME}])
    choice = complete(client, messages=user(script([output.encode()])), tool_choice="required")
    assert [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls] == [
        ("get_weather", WEATHER),
        ("get_time", TIME),
    ]
    assert choice.finish_reason == "tool_calls"


def test_a_named_function_is_forced_with_its_parameters_schema(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    echoed = complete(client, messages=user(ECHO), tool_choice=named)
    # The echo is a JSON object, so it reads as the forced call's arguments.
    sent = json.loads(echoed.message.tool_calls[0].function.arguments)
    closed = {**TOOLS[0]["function"]["parameters"], "additionalProperties": False}  # as a forced call's schema is
    assert json.loads(sent["sampling_parameters"]["structured_outputs"]) == {"json": closed}
    output = _dumps(WEATHER).encode()
    choice = complete(client, messages=user(script([output])), tool_choice=named)
    assert choice.message.tool_calls[0].function.name == "get_weather"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == WEATHER
    assert choice.finish_reason == "stop"  # OpenAI's answer for a forced function
    for cut in range(0, len(output) + 1, 3):
        got = streamed(gateway, {"messages": user(script([output[:cut], output[cut:]])), "tool_choice": named})
        assert got["content"] == "" and [c["name"] for c in got["calls"]] == ["get_weather"], cut
        assert json.loads(got["calls"][0]["arguments"]) == WEATHER


def test_parallel_tool_calls_false_keeps_the_first_call(client: openai.OpenAI) -> None:
    output, _, _ = CASES["hermes"]
    choice = complete(client, messages=user(script([output.encode()])), parallel_tool_calls=False)
    assert [c.function.name for c in choice.message.tool_calls] == ["get_weather"]
    echoed = complete(client, messages=user(ECHO), tool_choice="required", parallel_tool_calls=False)
    sent = json.loads(echoed.message.content)
    assert json.loads(sent["sampling_parameters"]["structured_outputs"])["json"]["maxItems"] == 1


@pytest.mark.parametrize(
    ("output", "finish"),
    [
        ('Sure: <tool_call>{"name": "get_wea', "length"),
        ('<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>', "stop"),
        ("<tool_call>not json</tool_call> and more", "stop"),
    ],
    ids=["truncated", "unknown-function", "not-json"],
)
def test_malformed_output_comes_back_as_text(
    gateway: GatewayProcess, client: openai.OpenAI, output: str, finish: str
) -> None:
    choice = complete(client, messages=user(script([output.encode()], finish=finish)))
    assert choice.message.content == output and not choice.message.tool_calls
    assert choice.finish_reason == finish
    data = output.encode()
    for cut in range(len(data) + 1):
        got = streamed(gateway, {"messages": user(script([data[:cut], data[cut:]], finish=finish))})
        assert got == {"content": output, "finish": finish, "calls": []}, cut


def test_a_call_cut_after_it_opened_keeps_the_arguments_it_streamed(
    gateway: GatewayProcess, client: openai.OpenAI
) -> None:
    """Once a call's opening and arguments are sent they cannot be taken back: cut by
    ``max_tokens``, the call ends with the arguments streamed so far, streamed or not."""
    output = 'Sure: <tool_call>{"name": "get_weather", "arguments": {"city": "Pa'
    choice = complete(client, messages=user(script([output.encode()], finish="length")))
    assert choice.message.content == "Sure: " and choice.finish_reason == "length"
    assert [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or ()] == [
        ("get_weather", '{"city": "Pa')
    ]
    data = output.encode()
    for cut in range(len(data) + 1):
        got = streamed(gateway, {"messages": user(script([data[:cut], data[cut:]], finish="length"))})
        assert got["content"] == "Sure: " and got["finish"] == "length", cut
        assert [(c["name"], c["arguments"]) for c in got["calls"]] == [("get_weather", '{"city": "Pa')], cut


def test_arguments_stream_as_they_are_generated(gateway: GatewayProcess) -> None:
    """One response per token: the call opens before its arguments are done, and its arguments
    arrive in several deltas that join to the whole."""
    pieces = [
        b"<tool_call>",
        b'{"name": "get_weather", ',
        b'"arguments": {"city": ',
        b'"Zur',
        b'ich"',
        b"}}",
        b"</tool_call>",
    ]
    request = {"model": SCRIPTED, "stream": True, "tools": TOOLS, "messages": user(script(pieces))}
    deltas = []
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=request, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    deltas.extend(
                        part["function"].get("arguments", "") for part in choice["delta"].get("tool_calls") or ()
                    )
    assert deltas == ["", '{"city": ', '"Zur', 'ich"', "}"]


CITY = [b'{"city": ', b'"Zur', b'ich"', b"}"]
"""A call's arguments as four tokens; their re-dumped deltas are the same four pieces."""
# parser → (the tokens of one call to get_weather, the request's extra fields)
STREAMED: dict[str, tuple[list[bytes], dict[str, Any]]] = {
    "hermes": ([b"<tool_call>", b'{"name": "get_weather", "arguments": ', *CITY, b"}", b"</tool_call>"], {}),
    "mistral": ([b"[TOOL_CALLS]", b"get_weather", b"[ARGS]", *CITY], {}),
    "llama3_json": ([b"<|python_tag|>", b'{"name": "get_weather", ', b'"parameters": ', *CITY, b"}"], {}),
    "deepseek_v31": (
        ["<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>".encode(), *CITY]
        + ["<｜tool▁call▁end｜><｜tool▁calls▁end｜>".encode()],
        {},
    ),
    "kimi_k2": (
        [b"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>", *CITY]
        + [b"<|tool_call_end|><|tool_calls_section_end|>"],
        {},
    ),
}
TYPED: dict[str, list[bytes]] = {
    "qwen3_coder": [b"<tool_call>\n<function=get_weather>\n<parameter=city>\n", b"Zur", b"ich", b"\n</parameter>\n"]
    + [b"</function>\n</tool_call>"],
    "glm45": [b"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>", b"Zur", b"ich", b"</arg_value>\n"]
    + [b"</tool_call>"],
}
"""The XML formats: a string parameter streams (its value's pieces as JSON string pieces)."""
PYTHONIC: dict[str, list[bytes]] = {"pythonic": [b"[get_weather(", b'city="Zur', b'ich"', b")]"]}
"""A Python call list: the call opens once its first value begins, a string's closing quote
waits for what follows (Python joins adjacent literals)."""
FORCED: dict[str, tuple[list[bytes], dict[str, Any]]] = {
    "forced_named": (CITY, {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    "forced_required": ([b'[{"name": "get_weather", ', b'"parameters": ', *CITY, b"}]"], {"tool_choice": "required"}),
}


def argument_deltas(gateway: GatewayProcess, pieces: list[bytes], extra: dict[str, Any]) -> list[tuple[str, str]]:
    """Each tool-call delta of a stream of one response per piece: (name or "", arguments)."""
    request = {"model": SCRIPTED, "stream": True, "tools": TOOLS, "messages": user(script(pieces)), **extra}
    deltas = []
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=request, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    for part in choice["delta"].get("tool_calls") or ():
                        deltas.append((part["function"].get("name", ""), part["function"].get("arguments", "")))
    return deltas


def test_each_format_streams_its_arguments_as_they_are_generated(
    parser_gateway: tuple[str, GatewayProcess],
) -> None:
    """The call opens before its arguments are whole, and they arrive in several deltas that
    join to exactly what the whole answer says."""
    name, gateway = parser_gateway
    if name in PYTHONIC:
        assert argument_deltas(gateway, PYTHONIC[name], {}) == [
            ("get_weather", ""),
            ("", '{"city": "Zur'),
            ("", "ich"),
            ("", '"}'),
        ]
        return
    if name in TYPED:
        deltas = argument_deltas(gateway, TYPED[name], {})
        assert deltas[0] == ("get_weather", "")
        sent = [arguments for _, arguments in deltas[1:] if arguments]
        assert "".join(sent) == '{"city": "Zurich"}' and '"city": "Zur' in sent and "ich" in sent
        return
    pieces, extra = STREAMED[name]
    deltas = argument_deltas(gateway, pieces, extra)
    assert deltas[0] == ("get_weather", "")
    assert [arguments for _, arguments in deltas[1:]] == [piece.decode() for piece in CITY]


def test_each_format_cut_after_its_call_opened_keeps_what_it_streamed(
    parser_gateway: tuple[str, GatewayProcess],
) -> None:
    """``max_tokens`` cuts the call inside its string argument: streamed or not, the call ends
    with the arguments sent so far, and nothing of it comes back as content."""
    name, gateway = parser_gateway
    pieces = TYPED.get(name) or PYTHONIC.get(name) or STREAMED[name][0]
    cut_at = b"Zur" if name in TYPED else b'city="Zur' if name in PYTHONIC else b'"Zur'
    data = b"".join(pieces[: pieces.index(cut_at) + 1])
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as client:
        whole = complete(client, messages=user(script([data], finish="length")))
    assert not whole.message.content and whole.finish_reason == "length"
    assert [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or ()] == [
        ("get_weather", '{"city": "Zur')
    ]
    got = streamed(gateway, {"messages": user(script(pieces[: len(pieces) - 1], finish="length"))})
    assert got["content"] == "" and got["finish"] == "length"
    assert [c["name"] for c in got["calls"]] == ["get_weather"] and got["calls"][0]["arguments"].startswith(
        '{"city": "Zurich'
    )


@pytest.mark.parametrize("parser", sorted(FORCED))
def test_forced_calls_stream_their_arguments_as_they_are_generated(gateway: GatewayProcess, parser: str) -> None:
    pieces, extra = FORCED[parser]
    deltas = argument_deltas(gateway, pieces, extra)
    assert deltas[0][0] == "get_weather" and [name for name, _ in deltas[1:]] == [""] * (len(deltas) - 1)
    assert [arguments for _, arguments in deltas if arguments] == [piece.decode() for piece in CITY]


def test_a_tool_round_trip_renders_the_calls_and_results_in_the_prompt(client: openai.OpenAI) -> None:
    history = [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"},
        {"role": "user", "content": ECHO},
    ]
    choice = complete(client, messages=history)
    prompt = json.loads(choice.message.content)["text_input"]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<|im_start|>tool\n18 C and sunny<|im_end|>" in prompt


def test_streamed_tool_calls_assemble_in_the_sdk(client: openai.OpenAI) -> None:
    output, content, calls = CASES["hermes"]
    pieces = [output.encode()[i : i + 7] for i in range(0, len(output.encode()), 7)]
    with client.chat.completions.stream(model=SCRIPTED, messages=user(script(pieces)), tools=TOOLS) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert (message.content or "") == content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()] == calls
    assert final.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ([{"type": "web_search"}], "tools.0.type"),
        ([{"type": "function", "function": {"name": "has space"}}], "tools.0.function.name"),
        ([{"type": "function", "function": {"name": "f", "parameters": "nope"}}], "tools.0.function.parameters"),
    ],
    ids=["not-a-function", "bad-name", "parameters-not-a-schema"],
)
def test_bad_tools_are_a_400_naming_the_field(client: openai.OpenAI, tools: list[Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=SCRIPTED, messages=user("hi"), tools=tools)
    assert info.value.body["param"] == param  # type: ignore[index]
