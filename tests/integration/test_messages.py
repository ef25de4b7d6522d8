"""Anthropic's Messages API through the real Triton path, with the official ``anthropic`` SDK and
raw HTTP: text, tool use both ways, thinking, stop sequences, the token cap, counting, errors in
Anthropic's shape, and a client leaving mid-stream."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import MODEL, GatewayProcess, read_metric, start_gateway, stop_gateway, wait_for
from tests.integration.test_images import line_of, png
from tests.integration.test_tool_calls import ECHO, WEATHER

SCRIPTED = "scripted"
TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Weather in a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    }
]
CALL = (
    "<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": WEATHER}, ensure_ascii=False) + "\n</tool_call>"
)


def script(*pieces: str, finish: str = "stop", delay: float = 0.0) -> str:
    """A scripted reply, one response per piece, the last finishing with ``finish``."""
    responses: list[dict[str, Any]] = [{"utf8": [piece], "delay": delay} for piece in pieces]
    responses[-1]["finish_reason"] = [finish]
    return "<script>" + json.dumps({"responses": responses, "num_input_tokens": 7}) + "</script>"


def user(content: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


@pytest.fixture(scope="module")
def sdk(gateway: GatewayProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0, timeout=60) as client:
        yield client


def raw_events(gateway: GatewayProcess, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A raw SSE stream: (event name, data) pairs, checking that each names its data's type."""
    events = []
    with httpx.stream("POST", gateway.url + "/v1/messages", json={**body, "stream": True}, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["type"] == name
                events.append((name, data))
    return events


def folded(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The event names, consecutive deltas of one block as one (their number is timing)."""
    out: list[str] = []
    for name, data in events:
        if name == "content_block_delta":
            name = f"delta:{data['delta']['type']}"
        if not (out and out[-1] == name and name.startswith("delta:")):
            out.append(name)
    return out


# -- text ------------------------------------------------------------------------------------------


def test_create_answers_a_message_object(sdk: anthropic.Anthropic) -> None:
    message = sdk.messages.create(
        model=SCRIPTED, max_tokens=50, messages=user(script("Hello ", "wörld 🙂")), system="Be brief."
    )
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == SCRIPTED
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Hello wörld 🙂"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens == 7 and message.usage.output_tokens == 2


def test_stream_events_follow_anthropics_sequence(gateway: GatewayProcess) -> None:
    body = {"model": SCRIPTED, "max_tokens": 50, "messages": user(script("a", "b", "c"))}
    events = raw_events(gateway, body)
    assert folded(events) == [
        "message_start",
        "content_block_start",
        "delta:text_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] == 7
    assert "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta") == "abc"
    assert events[-2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[-2][1]["usage"]["output_tokens"] == 3


def test_sdk_stream_matches_create(sdk: anthropic.Anthropic) -> None:
    messages = user(script("one ", "two ", "three"))
    with sdk.messages.stream(model=SCRIPTED, max_tokens=50, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    whole = sdk.messages.create(model=SCRIPTED, max_tokens=50, messages=messages)
    assert text == "one two three"
    assert final.model_dump(exclude={"id"}) == whole.model_dump(exclude={"id"})


def test_stop_sequence_is_cut_and_named(sdk: anthropic.Anthropic, gateway: GatewayProcess) -> None:
    messages = user(script("Hello ", "EN", "D and more"))
    message = sdk.messages.create(model=SCRIPTED, max_tokens=50, messages=messages, stop_sequences=["nope", "END"])
    assert message.content[0].text == "Hello "  # type: ignore[union-attr]
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "END"
    events = raw_events(gateway, {"model": SCRIPTED, "max_tokens": 50, "messages": messages, "stop_sequences": ["END"]})
    assert "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta") == "Hello "
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


def test_stop_sequence_cut_by_a_backend_that_enforces_stops(sdk: anthropic.Anthropic) -> None:
    """tiny-llm stops at a stop string itself, as vLLM does: it is asked to keep it, so the
    gateway still sees which one matched."""
    stops = ["a", "e", "i", "o", "n", "t"]
    message = sdk.messages.create(model=MODEL, max_tokens=64, messages=user("Hello!"), stop_sequences=stops)
    assert message.stop_reason == "stop_sequence" and message.stop_sequence in stops
    # A stop can match the very first character: then there is no text block at all.
    text = "".join(block.text for block in message.content if block.type == "text")
    assert message.stop_sequence not in text


def test_token_cap_is_max_tokens(sdk: anthropic.Anthropic) -> None:
    message = sdk.messages.create(model=SCRIPTED, max_tokens=2, messages=user(script("a", "b", finish="length")))
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None


def test_count_tokens_equals_the_billed_input_tokens(sdk: anthropic.Anthropic) -> None:
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}]},
        {"role": "user", "content": [{"type": "text", "text": "Go on."}]},
    ]
    system = [{"type": "text", "text": "You are terse."}]
    counted = sdk.messages.count_tokens(model=MODEL, messages=messages, system=system)  # type: ignore[arg-type]
    made = sdk.messages.create(model=MODEL, max_tokens=2, messages=messages, system=system)  # type: ignore[arg-type]
    assert counted.input_tokens == made.usage.input_tokens > 10


# -- tools -----------------------------------------------------------------------------------------


def test_tool_use_out_whole_and_streamed(sdk: anthropic.Anthropic) -> None:
    messages = user(script("Checking. ", CALL[:30], CALL[30:]))
    message = sdk.messages.create(model=SCRIPTED, max_tokens=50, messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    assert message.stop_reason == "tool_use"
    assert [block.type for block in message.content] == ["text", "tool_use"]
    call = message.content[1]
    assert call.type == "tool_use" and call.id.startswith("toolu_")
    assert call.name == "get_weather" and call.input == WEATHER
    with sdk.messages.stream(model=SCRIPTED, max_tokens=50, messages=messages, tools=TOOLS) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    assert final.model_dump(exclude={"id"}, mode="json")["content"][1]["input"] == WEATHER
    assert final.stop_reason == "tool_use"


def test_tool_result_reaches_the_template(sdk: anthropic.Anthropic) -> None:
    messages = [
        {"role": "user", "content": "Weather in Zürich?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Zürich"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [{"type": "text", "text": "21 °C, sunny"}],
                },
                {"type": "text", "text": ECHO},
            ],
        },
    ]
    message = sdk.messages.create(model=SCRIPTED, max_tokens=50, messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    prompt = json.loads(message.content[0].text)["text_input"]  # type: ignore[union-attr]
    assert "21 °C, sunny" in prompt and '"city": "Zürich"' in prompt and "get_weather" in prompt


def test_forced_tool_choice_calls_the_tool(sdk: anthropic.Anthropic) -> None:
    arguments = json.dumps(WEATHER, ensure_ascii=False)
    message = sdk.messages.create(
        model=SCRIPTED,
        max_tokens=50,
        messages=user(script(arguments[:9], arguments[9:])),
        tools=TOOLS,  # type: ignore[arg-type]
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert message.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "input", None)) for b in message.content] == [("tool_use", WEATHER)]


# -- thinking --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def thinking_gateway(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    entry = {"reasoning_parser": "qwen3", "tool_call_parser": "hermes"}
    log = tmp_path_factory.mktemp("gateway-thinking") / "gateway.log"
    process = start_gateway(triton.grpc_url, log, env={"GATEWAY_MODEL_FILES": json.dumps({SCRIPTED: entry})})
    yield process
    stop_gateway(process)


def test_thinking_blocks_carry_the_reasoning_and_a_signature(thinking_gateway: GatewayProcess) -> None:
    thought = "Weigh 2+2 — 東京"
    messages = user(script("<think>", thought, "</think>", "It is 4."))
    thinking = {"type": "enabled", "budget_tokens": 1024}
    with anthropic.Anthropic(base_url=thinking_gateway.url, api_key="unused", max_retries=0) as client:
        message = client.messages.create(model=SCRIPTED, max_tokens=2048, messages=messages, thinking=thinking)  # type: ignore[arg-type]
        plain = client.messages.create(model=SCRIPTED, max_tokens=2048, messages=messages)
    assert [block.type for block in message.content] == ["thinking", "text"]
    block = message.content[0]
    assert block.type == "thinking" and block.thinking == thought
    assert block.signature and thought not in block.signature  # sealed: opaque, opened only by the gateway
    assert message.content[1].text == "It is 4."  # type: ignore[union-attr]
    assert [block.type for block in plain.content] == ["text"]  # not asked for: not shown
    events = raw_events(
        thinking_gateway, {"model": SCRIPTED, "max_tokens": 2048, "messages": messages, "thinking": thinking}
    )
    assert folded(events) == [
        "message_start",
        "content_block_start",
        "delta:thinking_delta",
        "delta:signature_delta",
        "content_block_stop",
        "content_block_start",
        "delta:text_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_thinking_on_a_model_without_a_reasoning_parser_is_a_400(sdk: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        sdk.messages.create(
            model=SCRIPTED,
            max_tokens=2048,
            messages=user("hi"),
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
    assert info.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "thinking" in info.value.body["error"]["message"]  # type: ignore[index]


# -- errors ----------------------------------------------------------------------------------------


def test_bad_body_is_anthropic_shaped_400(gateway: GatewayProcess) -> None:
    response = httpx.post(gateway.url + "/v1/messages", json={"model": SCRIPTED, "messages": user("hi")})
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]


def test_an_image_for_a_text_only_model_is_a_400_naming_the_turn(sdk: anthropic.Anthropic) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError) as info:
        sdk.messages.create(model=SCRIPTED, max_tokens=5, messages=user([image, {"type": "text", "text": "?"}]))  # type: ignore[arg-type]
    message = info.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith("messages.0: ") and "image" in message


def test_image_blocks_reach_a_vision_model_pixel_exact(sdk: anthropic.Anthropic) -> None:
    """An Anthropic base64 image block becomes chat's image part: tiny-llm (which takes images)
    says the exact pixels it received before its answer, streamed as whole."""
    data = png(5, 4, seed=3)
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(data).decode()},
    }
    messages = user([image, {"type": "text", "text": "What is this?"}])
    message = sdk.messages.create(model=MODEL, max_tokens=4, messages=messages)  # type: ignore[arg-type]
    assert message.content[0].type == "text" and message.content[0].text.startswith(line_of(data) + "\n")
    with sdk.messages.stream(model=MODEL, max_tokens=4, messages=messages) as stream:  # type: ignore[arg-type]
        streamed = "".join(stream.text_stream)
    assert streamed.startswith(line_of(data) + "\n")


def test_budget_below_anthropics_minimum_is_a_400(gateway: GatewayProcess) -> None:
    body = {
        "model": SCRIPTED,
        "max_tokens": 4096,
        "messages": user("hi"),
        "thinking": {"type": "enabled", "budget_tokens": 10},
    }
    response = httpx.post(gateway.url + "/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert response.status_code == 400 and "1024" in response.json()["error"]["message"]


def test_unknown_model_is_not_found_error(sdk: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        sdk.messages.create(model="no-such-model", max_tokens=5, messages=user("hi"))
    assert info.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": info.value.body["error"]["message"]},
    }  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.count_tokens(model="no-such-model", messages=user("hi"))  # type: ignore[arg-type]


def test_backend_error_mid_stream_is_an_error_event(gateway: GatewayProcess) -> None:
    text = (
        "<script>"
        + json.dumps({"responses": [{"utf8": ["a"]}, {"utf8": ["b"]}], "error": {"message": "boom", "after": 1}})
        + "</script>"
    )
    events = raw_events(gateway, {"model": SCRIPTED, "max_tokens": 50, "messages": user(text)})
    name, data = events[-1]
    assert name == "error" and data["error"]["type"] in ("api_error", "overloaded_error")
    assert "message_stop" not in [n for n, _ in events]


# -- cancellation ----------------------------------------------------------------------------------


def test_client_disconnect_mid_stream_cancels_triton(gateway: GatewayProcess, triton: TritonServer) -> None:
    def counts() -> tuple[float, float]:
        return (
            read_metric(triton.metrics_url, "scripted_requests_cancelled_total"),
            read_metric(triton.metrics_url, "scripted_requests_in_flight"),
        )

    before, _ = counts()
    slow = "<script>" + json.dumps({"responses": [{"utf8": ["tok "], "delay": 0.05}] * 200}) + "</script>"
    body = {"model": SCRIPTED, "max_tokens": 500, "messages": user(slow), "stream": True}
    with httpx.stream("POST", gateway.url + "/v1/messages", json=body, timeout=30) as response:
        deltas = 0
        for line in response.iter_lines():
            deltas += '"text_delta"' in line
            if deltas == 3:
                break
    assert wait_for(lambda: counts() == (before + 1, 0), timeout=5), counts()
