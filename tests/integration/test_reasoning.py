"""Reasoning output through the real Triton path: the scripted model replays what each family of
reasoning model writes, and the gateway must split it into reasoning and answer, streamed and not.

One gateway per reasoning parser (the ``model_files`` setting picks it, and the tool-call parser
the family pairs it with). Each case is streamed once per byte position, cut into two responses
there, so a marker split anywhere must neither leak into the answer nor lose reasoning.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway
from tests.integration.test_tool_calls import ECHO, SCRIPTED, TOOLS, WEATHER, script, user

THOUGHT = 'Weigh 2+2 <tool_call>{"name": "get_time"}</tool_call> — 東京 🙂'
"""Reasoning with tool-call markup in it: not a call."""
CALL = json.dumps({"name": "get_weather", "arguments": WEATHER}, ensure_ascii=False)
HARMONY_ARGS = json.dumps(WEATHER, ensure_ascii=False)

# parser → (tool-call parser, model output, reasoning, content, calls)
CASES: dict[str, tuple[str | None, str, str, str, list[tuple[str, dict[str, Any]]]]] = {
    "deepseek_r1": ("hermes", f"{THOUGHT}</think>\n\nIt is 4.", THOUGHT, "\n\nIt is 4.", []),
    "qwen3": (
        "hermes",
        f"<think>\n{THOUGHT}\n</think>\n\nChecking. <tool_call>\n{CALL}\n</tool_call>",
        f"\n{THOUGHT}\n",
        "\n\nChecking. ",
        [("get_weather", WEATHER)],
    ),
    "mistral": ("mistral", f"[THINK]{THOUGHT}[/THINK]Four.", THOUGHT, "Four.", []),
    "granite": (None, f"Here is my thought process:{THOUGHT}Here is my response:Four.", THOUGHT, "Four.", []),
    "openai": (
        "openai",
        f"<|channel|>analysis<|message|>{THOUGHT}<|end|><|start|>assistant<|channel|>commentary "
        f"to=functions.get_weather <|constrain|>json<|message|>{HARMONY_ARGS}<|call|>",
        THOUGHT,
        "",
        [("get_weather", WEATHER)],
    ),
}
TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{% if m.reasoning_content %}[reasoning_content:{{ m.reasoning_content }}]"
    "{% endif %}{% if m.thinking %}[thinking:{{ m.thinking }}]{% endif %}{{ m.content or '' }}{% endfor %}<assistant>"
)
"""A template that shows the reasoning sent back, under two of the names templates read."""


OPENING_TEMPLATE = (
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
)
"""Qwen3.5-style: the generation prompt opens ``<think>`` (an empty, closed block with
``enable_thinking: false``), so the model writes only ``reasoning</think>answer``."""


@pytest.fixture(scope="module", params=sorted(CASES))
def reasoning_gateway(
    request: pytest.FixtureRequest, triton: TritonServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, GatewayProcess]]:
    name = request.param
    tool_parser = CASES[name][0]
    entry: dict[str, Any] = {"reasoning_parser": name}
    if tool_parser is not None:
        entry["tool_call_parser"] = tool_parser
    log = tmp_path_factory.mktemp(f"gateway-{name}") / "gateway.log"
    process = start_gateway(triton.grpc_url, log, env={"GATEWAY_MODEL_FILES": json.dumps({SCRIPTED: entry})})
    yield name, process
    stop_gateway(process)


@pytest.fixture(scope="module")
def template_gateway(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    folder = tmp_path_factory.mktemp("gateway-reasoning-template")
    template = folder / "template.jinja"
    template.write_text(TEMPLATE)
    entry = {"reasoning_parser": "qwen3", "chat_template": str(template)}
    process = start_gateway(
        triton.grpc_url, folder / "gateway.log", env={"GATEWAY_MODEL_FILES": json.dumps({SCRIPTED: entry})}
    )
    yield process
    stop_gateway(process)


@pytest.fixture(scope="module")
def opening_gateway(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """The scripted model with the Qwen3.5-style template; the reasoning parser is detected."""
    folder = tmp_path_factory.mktemp("gateway-reasoning-opening")
    template = folder / "template.jinja"
    template.write_text(OPENING_TEMPLATE)
    process = start_gateway(
        triton.grpc_url,
        folder / "gateway.log",
        env={"GATEWAY_MODEL_FILES": json.dumps({SCRIPTED: {"chat_template": str(template)}})},
    )
    yield process
    stop_gateway(process)


def fold(gateway: GatewayProcess, body: dict[str, Any]) -> dict[str, Any]:
    """A raw SSE stream folded as a client folds it; each delta is reasoning or content, and the
    reasoning comes under both of its names."""
    request = {"model": SCRIPTED, "stream": True, "stream_options": {"include_usage": True}, **body}
    reasoning = content = ""
    finish, usage = None, None
    calls: dict[int, dict[str, str]] = {}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=request, timeout=30) as response:
        assert response.status_code == 200, response.read()
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        chunk = json.loads(line[len("data: ") :])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk["choices"]:
            delta = choice["delta"]
            assert delta.get("reasoning") == delta.get("reasoning_content"), delta
            if delta.get("reasoning"):
                assert not delta.get("content"), "a delta is reasoning or content"
                reasoning += delta["reasoning"]
            content += delta.get("content") or ""
            for part in delta.get("tool_calls") or ():
                entry = calls.setdefault(part["index"], {"name": "", "arguments": ""})
                entry["name"] += part["function"].get("name") or ""
                entry["arguments"] += part["function"].get("arguments") or ""
            finish = choice["finish_reason"] or finish
    return {
        "reasoning": reasoning,
        "content": content,
        "calls": [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())],
        "finish": finish,
        "usage": usage,
    }


def test_each_format_splits_at_every_byte_streamed_and_not(reasoning_gateway: tuple[str, GatewayProcess]) -> None:
    name, gateway = reasoning_gateway
    _, output, reasoning, content, calls = CASES[name]
    data = output.encode()
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as client:
        whole = client.chat.completions.create(model=SCRIPTED, messages=user(script([data])), tools=TOOLS)
    message = whole.choices[0].message
    extra = message.model_extra or {}
    assert extra["reasoning_content"] == extra["reasoning"] == reasoning
    assert (message.content or "") == content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()] == calls
    assert whole.choices[0].finish_reason == ("tool_calls" if calls else "stop")
    for cut in range(len(data) + 1):
        got = fold(gateway, {"messages": user(script([data[:cut], data[cut:]])), "tools": TOOLS})
        assert (got["reasoning"], got["content"], got["calls"]) == (reasoning, content, calls), cut
        assert got["finish"] == whole.choices[0].finish_reason, cut


def test_usage_counts_the_reasoning_tokens(template_gateway: GatewayProcess) -> None:
    """One format shows the count (qwen3's); the rule is the same for all."""
    gateway = template_gateway
    pieces = [b"<think>", b"a", b"b", b"</think>", b"x", b"y"]
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as client:
        whole = client.chat.completions.create(model=SCRIPTED, messages=user(script(pieces)))
    assert whole.usage is not None and whole.usage.completion_tokens == 6
    assert whole.usage.completion_tokens_details is not None
    assert whole.usage.completion_tokens_details.reasoning_tokens == 4, "the markers' tokens and a, b"
    streamed = fold(gateway, {"messages": user(script(pieces))})
    assert streamed["usage"]["completion_tokens_details"] == {"reasoning_tokens": 4}
    dropped = fold(gateway, {"messages": user(script(pieces)), "include_reasoning": False})
    assert (dropped["reasoning"], dropped["content"]) == ("", "xy")
    assert dropped["usage"]["completion_tokens_details"] == {"reasoning_tokens": 4}


def test_the_responses_api_gives_a_reasoning_item_and_its_events(template_gateway: GatewayProcess) -> None:
    """One format shows the items (qwen3's); the encoder is the same for all."""
    data = f"<think>{THOUGHT}</think>\n\nIt is 4.".encode()
    with openai.OpenAI(base_url=template_gateway.url + "/v1", api_key="unused", max_retries=0) as client:
        response = client.responses.create(model=SCRIPTED, input=script([data[:9], data[9:]]))
        events = list(client.responses.create(model=SCRIPTED, input=script([data[:9], data[9:]]), stream=True))
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message"]
    thought = response.output[0]
    assert thought.content is not None and thought.content[0].text == THOUGHT
    assert response.output_text == "\n\nIt is 4."
    assert response.usage is not None and response.usage.output_tokens_details.reasoning_tokens == 2, (
        "both responses began inside the reasoning (the second also holds the answer: counted as reasoning)"
    )
    types = [event.type for event in events]
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")  # type: ignore[union-attr]
    assert deltas == THOUGHT
    assert types.index("response.reasoning_text.done") < types.index("response.output_text.delta")
    final = events[-1]
    assert final.type == "response.completed"
    assert [item.type for item in final.response.output] == ["reasoning", "message"]
    assert response.output[0].id.startswith("rs_")
    # Stored, the reasoning goes back into the next turn's prompt.
    with openai.OpenAI(base_url=template_gateway.url + "/v1", api_key="unused", max_retries=0) as client:
        echo = client.responses.create(model=SCRIPTED, input=ECHO, previous_response_id=response.id)
    assert f"<assistant>[reasoning_content:{THOUGHT}]" in json.loads(echo.output_text)["text_input"]


def test_reasoning_sent_back_reaches_the_template_under_its_names(template_gateway: GatewayProcess) -> None:
    with openai.OpenAI(base_url=template_gateway.url + "/v1", api_key="unused", max_retries=0) as client:
        for field in ("reasoning", "reasoning_content"):
            history = [
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4", field: "add them"},
                {"role": "user", "content": ECHO},
            ]
            answer = client.chat.completions.create(model=SCRIPTED, messages=history)  # type: ignore[arg-type]
            echoed = json.loads(answer.choices[0].message.content or "{}")
            prompt = echoed["text_input"]
            assert "<assistant>[reasoning_content:add them][thinking:add them]4" in prompt, (field, prompt)
        responses = client.responses.create(
            model=SCRIPTED,
            input=[
                {"role": "user", "content": "2+2?"},
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": "sum"}],
                },
                {"role": "assistant", "content": "4"},
                {"role": "user", "content": ECHO},
            ],  # type: ignore[list-item]
        )
        assert "<assistant>[reasoning_content:sum][thinking:sum]4" in json.loads(responses.output_text)["text_input"]


def test_models_say_which_parser(reasoning_gateway: tuple[str, GatewayProcess]) -> None:
    name, gateway = reasoning_gateway
    models = {m["id"]: m for m in httpx.get(gateway.url + "/v1/models", timeout=10).json()["data"]}
    assert models[SCRIPTED]["reasoning_parser"] == name
    assert models["tiny-llm"]["reasoning_parser"] is None, "tiny-llm's template has no reasoning markers"


def test_a_prompt_that_opens_think_makes_the_output_start_inside_it(opening_gateway: GatewayProcess) -> None:
    """The model writes only ``reasoning</think>answer``: the reasoning and a clean answer, streamed
    (cut at every byte) and not; with thinking off (the prompt closes the block), all answer."""
    models = {m["id"]: m for m in httpx.get(opening_gateway.url + "/v1/models", timeout=10).json()["data"]}
    assert models[SCRIPTED]["reasoning_parser"] == "qwen3", "detected from enable_thinking"
    data = f"{THOUGHT}</think>\n\nIt is 4.".encode()
    with openai.OpenAI(base_url=opening_gateway.url + "/v1", api_key="unused", max_retries=0) as client:
        echoed = client.chat.completions.create(model=SCRIPTED, messages=user(ECHO))
        said = (echoed.choices[0].message.model_extra or {})["reasoning_content"]  # no </think>: all reasoning
        assert json.loads(said)["text_input"].endswith("<think>\n")
        whole = client.chat.completions.create(model=SCRIPTED, messages=user(script([data])))
        message = whole.choices[0].message
        extra = message.model_extra or {}
        assert extra["reasoning_content"] == extra["reasoning"] == THOUGHT
        assert message.content == "\n\nIt is 4."
        assert whole.usage is not None and whole.usage.completion_tokens_details is not None
        assert whole.usage.completion_tokens_details.reasoning_tokens == 1, "one response, begun inside the reasoning"
        off = client.chat.completions.create(
            model=SCRIPTED,
            messages=user(script([b"It is 4."])),
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        assert off.choices[0].message.content == "It is 4."
        assert (off.choices[0].message.model_extra or {}).get("reasoning_content") is None
    for cut in range(len(data) + 1):
        got = fold(opening_gateway, {"messages": user(script([data[:cut], data[cut:]]))})
        assert (got["reasoning"], got["content"]) == (THOUGHT, "\n\nIt is 4."), cut
        assert got["finish"] == "stop", cut
    plain = fold(
        opening_gateway,
        {"messages": user(script([b"It is", b" 4."])), "chat_template_kwargs": {"enable_thinking": False}},
    )
    assert (plain["reasoning"], plain["content"]) == ("", "It is 4.")
