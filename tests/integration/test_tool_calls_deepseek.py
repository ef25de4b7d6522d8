"""DeepSeek V3/R1's fenced calls (``deepseek_v3``) and V3.2's DSML (``deepseek_v32``) through the
real Triton path: the scripted model replays what such a model emits, and the gateway, serving it
under each parser, turns it into OpenAI's ``tool_calls``, through the openai SDK, streamed and
not, with the output cut into two responses at every byte position.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway
from tests.integration.test_tool_calls import SCRIPTED, TIME, TOOLS, WEATHER, script, user

D = "｜DSML｜"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _v3_call(name: str, arguments: dict[str, Any]) -> str:
    return f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{_dumps(arguments)}\n```<｜tool▁call▁end｜>"


def _invoke(name: str, arguments: dict[str, str]) -> str:
    parameters = "".join(
        f'<{D}parameter name="{key}" string="true">{value}</{D}parameter>\n' for key, value in arguments.items()
    )
    return f'<{D}invoke name="{name}">\n{parameters}</{D}invoke>\n'


# parser → (model output, expected content, expected calls)
CASES: dict[str, tuple[str, str, list[tuple[str, dict[str, Any]]]]] = {
    "deepseek_v3": (
        "Checking both.<｜tool▁calls▁begin｜>"
        + _v3_call("get_weather", WEATHER)
        + "\n"
        + _v3_call("get_time", TIME)
        + "<｜tool▁calls▁end｜>",
        "Checking both.",
        [("get_weather", WEATHER), ("get_time", TIME)],
    ),
    "deepseek_v32": (
        "Checking both.\n\n"
        + f"<{D}function_calls>\n"
        + _invoke("get_weather", WEATHER)
        + _invoke("get_time", TIME)
        + f"</{D}function_calls>",
        "Checking both.\n\n",
        [("get_weather", WEATHER), ("get_time", TIME)],
    ),
}
# parser → the tokens of one call to get_weather whose city is "Zurich", and argument deltas
# those tokens settle (each token's own, at least: what one response settles may go out as one)
TOKENS: dict[str, tuple[list[str], list[str]]] = {
    "deepseek_v3": (
        ["<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"]
        + ['{"city": ', '"Zur', 'ich"', "}", "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"],
        ['{"city": ', '"Zur', 'ich"', "}"],
    ),
    "deepseek_v32": (
        [f'<{D}function_calls>\n<{D}invoke name="get_weather">\n', f'<{D}parameter name="city" string="true">']
        + ["Zur", "ich", f"</{D}parameter>\n</{D}invoke>\n</{D}function_calls>"],
        ["Zur", "ich"],
    ),
}
# A template for each format: what detection reads (the scripted model replays the user's script,
# whatever the template around it).
TEMPLATES = {
    "deepseek_v3": "{{'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n```json'}}",
    "deepseek_v32": f'{{{{"<{D}invoke name=\\"$FUNCTION_NAME\\">"}}}}',
}


def _client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _complete(client: openai.OpenAI, **body: Any) -> Any:
    return client.chat.completions.create(model=SCRIPTED, **{"tools": TOOLS, **body}).choices[0]


def _streamed(client: openai.OpenAI, **body: Any) -> dict[str, Any]:
    """A stream through the SDK, folded: content, finish reason, calls (id, name, arguments) and
    each call's argument deltas."""
    content, finish = "", None
    calls: dict[int, dict[str, Any]] = {}
    stream = client.chat.completions.create(model=SCRIPTED, stream=True, **{"tools": TOOLS, **body})
    for chunk in stream:
        (choice,) = chunk.choices
        content += choice.delta.content or ""
        for part in choice.delta.tool_calls or ():
            function = part.function
            assert function is not None
            if part.index not in calls:  # a call's first delta: its id and name
                assert part.id and part.id.startswith("call_") and part.type == "function", part
                calls[part.index] = {"id": part.id, "name": function.name, "arguments": "", "deltas": []}
            else:
                assert part.id is None and function.name is None, part
            calls[part.index]["arguments"] += function.arguments or ""
            calls[part.index]["deltas"].append(function.arguments or "")
        if choice.finish_reason is not None:
            finish = choice.finish_reason
    assert sorted(calls) == list(range(len(calls)))
    return {"content": content, "finish": finish, "calls": [calls[i] for i in sorted(calls)]}


def _gateway(
    triton: TritonServer, tmp_path_factory: pytest.TempPathFactory, name: str, settings: dict[str, Any]
) -> GatewayProcess:
    log = tmp_path_factory.mktemp(f"gateway-{name}") / "gateway.log"
    return start_gateway(triton.grpc_url, log, env={"GATEWAY_MODEL_FILES": json.dumps({SCRIPTED: settings})})


@pytest.fixture(scope="module", params=sorted(CASES))
def parser_gateway(
    request: pytest.FixtureRequest, triton: TritonServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, GatewayProcess]]:
    name = request.param
    process = _gateway(triton, tmp_path_factory, name, {"tool_call_parser": name})
    yield name, process
    stop_gateway(process)


def test_each_format_parses_at_every_split_streamed_and_not(parser_gateway: tuple[str, GatewayProcess]) -> None:
    name, gateway = parser_gateway
    output, content, calls = CASES[name]
    data = output.encode()
    with _client(gateway) as client:
        whole = _complete(client, messages=user(script([data])))
        assert (whole.message.content or "") == content
        assert [(c.function.name, json.loads(c.function.arguments)) for c in whole.message.tool_calls or ()] == calls
        assert whole.finish_reason == "tool_calls"
        arguments = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or ()]
        assert len({c.id for c in whole.message.tool_calls or ()}) == len(calls)
        for cut in range(len(data) + 1):
            got = _streamed(client, messages=user(script([data[:cut], data[cut:]])))
            assert got["content"] == content, (cut, got)
            assert [(c["name"], c["arguments"]) for c in got["calls"]] == arguments, cut
            assert got["finish"] == "tool_calls", cut


def test_each_format_streams_its_arguments_as_they_are_generated(
    parser_gateway: tuple[str, GatewayProcess],
) -> None:
    """One response per token: the call's id and name come first, then its arguments in several
    deltas, exactly what the whole answer says once joined."""
    name, gateway = parser_gateway
    tokens, deltas = TOKENS[name]
    with _client(gateway) as client:
        got = _streamed(client, messages=user(script([token.encode() for token in tokens])))
        whole = _complete(client, messages=user(script([token.encode() for token in tokens])))
    (call,) = got["calls"]
    assert call["name"] == "get_weather" and call["deltas"][0] == ""
    sent = [delta for delta in call["deltas"] if delta]
    assert all(delta in sent for delta in deltas) and len(sent) >= 3, sent
    assert call["arguments"] == whole.message.tool_calls[0].function.arguments == '{"city": "Zurich"}'
    assert got["content"] == "" and got["finish"] == "tool_calls"


def test_each_format_cut_after_its_call_opened_keeps_what_it_streamed(
    parser_gateway: tuple[str, GatewayProcess],
) -> None:
    """``max_tokens`` cuts the call inside its string argument: the call ends with the arguments
    sent so far, streamed or not, and nothing of it comes back as content."""
    name, gateway = parser_gateway
    tokens, _ = TOKENS[name]
    data = "".join(tokens[: tokens.index("ich" if name == "deepseek_v32" else 'ich"')]).encode()
    with _client(gateway) as client:
        whole = _complete(client, messages=user(script([data], finish="length")))
        assert not whole.message.content and whole.finish_reason == "length"
        assert [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or ()] == [
            ("get_weather", '{"city": "Zur')
        ]
        for cut in range(0, len(data) + 1, 7):
            got = _streamed(client, messages=user(script([data[:cut], data[cut:]], finish="length")))
            assert got["content"] == "" and got["finish"] == "length", cut
            assert [(c["name"], c["arguments"]) for c in got["calls"]] == [("get_weather", '{"city": "Zur')], cut


def test_each_format_gives_an_unknown_function_back_as_text(parser_gateway: tuple[str, GatewayProcess]) -> None:
    name, gateway = parser_gateway
    output = CASES[name][0].replace("get_weather", "launch_rockets")
    data = output.encode()
    with _client(gateway) as client:
        whole = _complete(client, messages=user(script([data])))
        assert whole.message.content == output and not whole.message.tool_calls
        assert whole.finish_reason == "stop"
        for cut in range(0, len(data) + 1, 5):
            got = _streamed(client, messages=user(script([data[:cut], data[cut:]])))
            assert got == {"content": output, "finish": "stop", "calls": []}, cut


@pytest.fixture(scope="module", params=sorted(TEMPLATES))
def detected_gateway(
    request: pytest.FixtureRequest, triton: TritonServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, GatewayProcess]]:
    """The scripted model with a chat template that writes the format's markers, and no parser set."""
    name = request.param
    template: Path = tmp_path_factory.mktemp(f"template-{name}") / "chat.jinja"
    template.write_text(
        "{% if false %}" + TEMPLATES[name] + "{% endif %}"
        "{% for message in messages %}{{ message['content'] }}{% endfor %}",
        encoding="utf-8",
    )
    process = _gateway(triton, tmp_path_factory, f"detected-{name}", {"chat_template": str(template)})
    yield name, process
    stop_gateway(process)


def test_each_format_is_detected_from_its_template(detected_gateway: tuple[str, GatewayProcess]) -> None:
    name, gateway = detected_gateway
    models = {m["id"]: m for m in httpx.get(gateway.url + "/v1/models", timeout=10).json()["data"]}
    assert models[SCRIPTED]["tool_call_parser"] == name
    output, content, calls = CASES[name]
    with _client(gateway) as client:
        whole = _complete(client, messages=user(script([output.encode()])))
    assert (whole.message.content or "") == content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in whole.message.tool_calls or ()] == calls
