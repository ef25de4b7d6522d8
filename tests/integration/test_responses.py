"""The Responses API end to end: the openai SDK and raw HTTP → gateway → real Triton.

The scripted model replays what a test asks for (exact text, tool-call markup, an error, a slow
stream); tiny-llm is the real model (token caps, structured outputs). Warnings are errors
(pytest's config), so the SDK assembling our streams (``responses.stream``) must do it cleanly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import jsonschema
import openai
import pytest
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, ConfigDict, Field

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import MODEL, GatewayProcess, read_metric, start_gateway, stop_gateway, wait_for
from tests.integration.test_structured_outputs import SCHEMA
from tests.postgres import start_postgres, stop_postgres

SCRIPTED = "scripted"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    }
]
ECHO = "<script>" + json.dumps({"echo_inputs": True}) + "</script>"
"""The scripted model answers one JSON object of what it received (``text_input``: the prompt)."""
TEXT_SEQUENCE = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def script(*pieces: str, delay: float = 0.0, **extra: Any) -> str:
    """A scripted reply, one response per piece (tagged: tool prompts carry other JSON)."""
    responses = [{"utf8": [piece], "delay": delay} for piece in pieces]
    return "<script>" + json.dumps({"responses": responses, **extra}) + "</script>"


def slow_script(responses: int = 200, delay: float = 0.05) -> str:
    return "<script>" + json.dumps({"responses": [{"utf8": ["tok "], "delay": delay}] * responses}) + "</script>"


def kinds(events: list[Any]) -> list[str]:
    """The event types, consecutive deltas as one (how many arrive together is the backend's timing)."""
    out: list[str] = []
    for event in events:
        if not (out and out[-1] == event["type"] == "response.output_text.delta"):
            out.append(event["type"])
    return out


def prompt_of(response: Any) -> str:
    """What Triton received as ``text_input`` (from an ``ECHO`` response)."""
    return str(json.loads(response.output_text)["text_input"])


def raw_events(gateway: GatewayProcess, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[Any]:
    """The SSE events of a streamed request, read raw: each named, its name its JSON's type."""
    with httpx.stream(
        "POST", gateway.url + "/v1/responses", json={**body, "stream": True}, headers=headers, timeout=60
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read().decode()
    return events_of(raw)


def events_of(raw: str) -> list[dict[str, Any]]:
    """SSE events framed as the Responses stream frames them: named, the name the JSON's type."""
    events = []
    for block in raw.split("\n\n"):
        if not block or block.startswith(":"):
            continue
        name, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}", block
        events.append(event)
    return events


# -- text in, text out ---------------------------------------------------------------------------


def test_create_answers_a_completed_response_with_the_text_and_usage(client: openai.OpenAI) -> None:
    response = client.responses.create(model=SCRIPTED, input=script("Hello", ", ", "world"))
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status == "completed" and response.completed_at is not None
    assert response.output_text == "Hello, world"
    (message,) = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    assert message.id.startswith("msg_")
    assert response.usage is not None
    assert response.usage.output_tokens == 3
    assert response.usage.total_tokens == response.usage.input_tokens + 3
    assert response.model == SCRIPTED and response.store is True  # type: ignore[attr-defined]


def test_the_stream_is_the_documented_event_sequence(gateway: GatewayProcess) -> None:
    events = raw_events(gateway, {"model": SCRIPTED, "input": script("Hello", ", ", "world", delay=0.05)})
    assert kinds(events) == TEXT_SEQUENCE
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    created, in_progress = events[0]["response"], events[1]["response"]
    assert created["status"] == in_progress["status"] == "in_progress" and created["output"] == []
    item = events[2]["item"]
    assert item == {"id": item["id"], "type": "message", "status": "in_progress", "content": [], "role": "assistant"}
    for event in events[3:-2]:
        assert (event["item_id"], event["output_index"], event["content_index"]) == (item["id"], 0, 0)
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Hello, world"
    text_done, part_done, item_done, completed = events[-4:]
    assert text_done["text"] == "Hello, world"
    assert part_done["part"] == {"type": "output_text", "annotations": [], "logprobs": [], "text": "Hello, world"}
    assert item_done["item"]["status"] == "completed" and item_done["output_index"] == 0
    final = completed["response"]
    assert final["id"] == created["id"] and final["status"] == "completed"
    assert final["output"] == [item_done["item"]]


def test_the_sdk_stream_helper_assembles_our_stream(client: openai.OpenAI) -> None:
    with client.responses.stream(model=SCRIPTED, input=script("Hello", ", ", "world", delay=0.05)) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Hello, world"
    assert final.output_text == "Hello, world" and final.status == "completed"


def test_streamed_and_whole_answers_are_the_same_on_tiny_llm(client: openai.OpenAI) -> None:
    args: dict[str, Any] = {
        "model": MODEL,
        "input": "Tell me a story about a robot.",
        "max_output_tokens": 12,
        "temperature": 0,
        "extra_body": {"ignore_eos": True},
    }
    whole = client.responses.create(**args)
    with client.responses.stream(**args) as stream:
        events = list(stream)
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output_text == whole.output_text and whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens == 12  # type: ignore[union-attr]


def test_max_output_tokens_makes_the_response_incomplete(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    args = {"model": MODEL, "input": "Go on.", "max_output_tokens": 5, "extra_body": {"ignore_eos": True}}
    response = client.responses.create(**args)  # type: ignore[arg-type]
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete"  # type: ignore[union-attr]
    assert response.usage is not None and response.usage.output_tokens == 5
    events = raw_events(gateway, {"model": MODEL, "input": "Go on.", "max_output_tokens": 5, "ignore_eos": True})
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-2]["type"] == "response.output_item.done" and events[-2]["item"]["status"] == "incomplete"


def test_instructions_come_first_as_the_system_message(client: openai.OpenAI) -> None:
    response = client.responses.create(model=SCRIPTED, instructions="Answer in French.", input=ECHO)
    prompt = prompt_of(response)
    assert prompt.startswith("<|im_start|>system\nAnswer in French.<|im_end|>\n<|im_start|>user\n")
    assert response.instructions == "Answer in French."


def test_input_items_render_as_the_same_chat_would(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=SCRIPTED,
        input=[
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "Hi"}, {"type": "input_text", "text": "there"}],
            },
            {"role": "assistant", "content": "Hello!"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ECHO}]},
        ],
    )
    chat = client.chat.completions.create(
        model=SCRIPTED,
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Hi\nthere"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": ECHO},
        ],
    )
    assert prompt_of(response) == json.loads(chat.choices[0].message.content or "")["text_input"]


# -- tools ---------------------------------------------------------------------------------------


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_a_tool_call_comes_out_as_a_function_call_item(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    response = client.responses.create(model=SCRIPTED, input=script("Checking. ", CALL), tools=TOOLS)  # type: ignore[arg-type]
    message, call = response.output
    assert message.type == "message" and response.output_text == "Checking. "
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id.startswith("call_") and (call.id or "").startswith("fc_")
    events = raw_events(gateway, {"model": SCRIPTED, "input": script("Checking. ", CALL), "tools": TOOLS})
    types = [e["type"] for e in events]
    start = types.index("response.function_call_arguments.delta") - 1
    assert types[start : start + 4] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    added, delta, done, item_done = events[start : start + 4]
    assert added["item"]["arguments"] == "" and added["item"]["status"] == "in_progress"
    assert delta["item_id"] == done["item_id"] == added["item"]["id"] == item_done["item"]["id"]
    assert json.loads(done["arguments"]) == {"city": "Paris"} and delta["delta"] == done["arguments"]
    with client.responses.stream(model=SCRIPTED, input=script("Checking. ", CALL), tools=TOOLS) as stream:  # type: ignore[arg-type]
        final = stream.get_final_response()
    assert final.output[1].type == "function_call"
    assert final.output[1].parsed_arguments == {"city": "Paris"}  # type: ignore[union-attr]  # strict: the SDK parses


def test_a_function_call_output_goes_back_in_as_a_tool_message(client: openai.OpenAI) -> None:
    first = client.responses.create(model=SCRIPTED, input=script(CALL), tools=TOOLS)  # type: ignore[arg-type]
    call = first.output[0]
    assert call.type == "function_call"
    followed = client.responses.create(
        model=SCRIPTED,
        previous_response_id=first.id,
        input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": "18 C and sunny"},
            {"role": "user", "content": ECHO},
        ],
        tools=TOOLS,  # type: ignore[arg-type]
    )
    prompt = prompt_of(followed)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<|im_start|>tool\n18 C and sunny<|im_end|>" in prompt
    # The same history sent as items, without the store, renders the same prompt.
    stateless = client.responses.create(
        model=SCRIPTED,
        store=False,
        input=[
            *[item.model_dump(exclude_none=True) for item in first.output],
            {"type": "function_call_output", "call_id": call.call_id, "output": "18 C and sunny"},
            {"role": "user", "content": ECHO},
        ],
        tools=TOOLS,  # type: ignore[arg-type]
    )
    assert prompt_of(stateless).endswith(prompt.split(script(CALL))[-1])


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_weather"}], ids=["required", "named"])
def test_forced_tool_choices_are_enforced_on_tiny_llm(client: openai.OpenAI, choice: Any) -> None:
    parameters = {**TOOLS[0]["parameters"], "properties": {"city": {"enum": ["Paris", "Tokyo"]}}}
    tools = [{**TOOLS[0], "parameters": parameters}]
    for seed in range(3):
        response = client.responses.create(
            model=MODEL,
            input="Weather?",
            tools=tools,
            tool_choice=choice,
            extra_body={"seed": seed},  # type: ignore[arg-type]
        )
        assert response.output and response.status == "completed"
        for call in response.output:  # required: one call or several
            assert call.type == "function_call" and call.name == "get_weather"
            jsonschema.validate(json.loads(call.arguments), parameters)


# -- structured outputs --------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_text_format_json_schema_is_enforced_on_tiny_llm(client: openai.OpenAI, stream: bool) -> None:
    text = {"format": {"type": "json_schema", "name": "person", "schema": SCHEMA, "strict": True}}
    for seed in range(5):
        args: dict[str, Any] = {"model": MODEL, "input": "A person as JSON.", "text": text, "max_output_tokens": 400}
        args["extra_body"] = {"seed": seed, "temperature": 1.0}
        if stream:
            with client.responses.stream(**args) as events:
                response = events.get_final_response()
        else:
            response = client.responses.create(**args)
        assert response.status == "completed", (seed, response.output_text)
        jsonschema.validate(json.loads(response.output_text), SCHEMA)
        assert response.text is not None and response.text.format.type == "json_schema"  # type: ignore[union-attr]


# -- stored conversations ------------------------------------------------------------------------


def test_previous_response_id_continues_the_conversation(client: openai.OpenAI) -> None:
    first = client.responses.create(model=SCRIPTED, instructions="Old rules.", input=script("first answer"))
    second = client.responses.create(model=SCRIPTED, previous_response_id=first.id, input=ECHO)
    prompt = prompt_of(second)
    assert "first answer<|im_end|>" in prompt and prompt.index(script("first answer")) < prompt.index("first answer<")
    assert "Old rules." not in prompt  # instructions are not carried over, as on OpenAI
    assert second.previous_response_id == first.id
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=SCRIPTED, previous_response_id="resp_unknown", input="hi")
    assert info.value.code == "previous_response_not_found"
    assert info.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_retrieve_input_items_and_delete(client: openai.OpenAI) -> None:
    created = client.responses.create(
        model=SCRIPTED, input=[{"role": "user", "content": "one"}, {"role": "user", "content": script("two")}]
    )
    assert client.responses.retrieve(created.id).model_dump() == created.model_dump()
    items = list(client.responses.input_items.list(created.id))
    assert [i.content[0].text for i in items] == [script("two"), "one"]  # type: ignore[union-attr]  # desc
    ascending = client.responses.input_items.list(created.id, order="asc", limit=1)
    assert [i.content[0].text for i in ascending.data] == ["one"] and ascending.has_more  # type: ignore[union-attr]
    assert [i.content[0].text for i in ascending.get_next_page().data] == [script("two")]  # type: ignore[union-attr]
    client.responses.delete(created.id)
    deleted = httpx.delete(str(client.base_url) + f"responses/{created.id}")
    assert deleted.status_code == 404
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_store_false_keeps_nothing(client: openai.OpenAI) -> None:
    response = client.responses.create(model=SCRIPTED, input=script("x"), store=False)
    assert response.store is False  # type: ignore[attr-defined]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


@pytest.fixture(scope="module")
def keyed_gateway(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    log = tmp_path_factory.mktemp("gateway-keys") / "gateway.log"
    process = start_gateway(triton.grpc_url, log, env={"GATEWAY_API_KEYS": "key-alice,key-bob"})
    yield process
    stop_gateway(process)


def test_another_api_keys_response_is_invisible(keyed_gateway: GatewayProcess) -> None:
    def sdk(key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=keyed_gateway.url + "/v1", api_key=key, max_retries=0)

    with sdk("key-alice") as alice, sdk("key-bob") as bob:
        mine = alice.responses.create(model=SCRIPTED, input=script("secret"))
        assert alice.responses.retrieve(mine.id).output_text == "secret"
        with pytest.raises(openai.NotFoundError):
            bob.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.input_items.list(mine.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.delete(mine.id)
        with pytest.raises(openai.BadRequestError) as info:
            bob.responses.create(model=SCRIPTED, previous_response_id=mine.id, input="hi")
        assert info.value.code == "previous_response_not_found"
        assert alice.responses.retrieve(mine.id).id == mine.id  # bob's delete did nothing


# -- cancellation and failures -------------------------------------------------------------------


def _scripted_counts(triton: TritonServer) -> tuple[float, float]:
    return (
        read_metric(triton.metrics_url, "scripted_requests_cancelled_total"),
        read_metric(triton.metrics_url, "scripted_requests_in_flight"),
    )


def test_client_disconnect_cancels_triton_and_stores_what_was_said(
    gateway: GatewayProcess, triton: TritonServer, client: openai.OpenAI
) -> None:
    cancelled_before, _ = _scripted_counts(triton)
    body = {"model": SCRIPTED, "input": slow_script(), "stream": True}
    with httpx.stream("POST", gateway.url + "/v1/responses", json=body, timeout=30) as response:
        lines = response.iter_lines()
        created = json.loads(next(line for line in lines if line.startswith("data: "))[6:])
        deltas = 0
        for line in lines:
            deltas += line.startswith("data: ") and '"response.output_text.delta"' in line
            if deltas == 3:
                break
        assert _scripted_counts(triton)[1] >= 1  # the model is replaying for us right now
    assert wait_for(lambda: _scripted_counts(triton) == (cancelled_before + 1, 0), timeout=5), _scripted_counts(triton)
    response_id = created["response"]["id"]
    assert wait_for(lambda: _retrievable(client, response_id), timeout=5)
    stored = client.responses.retrieve(response_id)
    assert stored.status == "incomplete" and stored.output_text.startswith("tok tok tok ")
    assert stored.incomplete_details is not None and stored.incomplete_details.reason == "client_disconnected"  # type: ignore[comparison-overlap]


def _retrievable(client: openai.OpenAI, response_id: str) -> bool:
    try:
        client.responses.retrieve(response_id)
    except openai.NotFoundError:
        return False
    return True


def test_client_disconnect_on_a_whole_response_cancels_triton(gateway: GatewayProcess, triton: TritonServer) -> None:
    cancelled_before, _ = _scripted_counts(triton)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            gateway.url + "/v1/responses",
            json={"model": SCRIPTED, "input": slow_script()},
            timeout=httpx.Timeout(10, read=1.0),
        )
    assert wait_for(lambda: _scripted_counts(triton) == (cancelled_before + 1, 0), timeout=5), _scripted_counts(triton)


def test_a_backend_error_mid_stream_is_response_failed(gateway: GatewayProcess, client: openai.OpenAI) -> None:
    body = {"model": SCRIPTED, "input": script("a", "b", "c", error={"message": "boom", "after": 1})}
    events = raw_events(gateway, body)
    assert kinds(events) == [*TEXT_SEQUENCE[:5], "response.failed"]
    failed = events[-1]
    assert failed["response"]["status"] == "failed"
    error = failed["response"]["error"]
    assert "boom" in error["message"] and error["type"] == "server_error" and error["code"] == "backend_error"
    assert client.responses.retrieve(failed["response"]["id"]).status == "failed"
    with client.responses.stream(**body) as stream:
        seen = [event.type for event in stream]
    assert seen[-1] == "response.failed"


def test_bad_requests_are_400s_naming_the_field(client: openai.OpenAI) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tools": [{"type": "custom", "name": "patch"}]}, "tools.0.type"),
        ({"background": True, "store": False}, "background"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "x"}]}]},
            "input.0.content.0.type",
        ),
    ]
    for extra, param in cases:
        args = {"model": SCRIPTED, "input": "hi", **extra}
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(**args)
        assert info.value.body["param"] == param  # type: ignore[index]


def test_responses_are_counted_under_their_own_endpoint(gateway: GatewayProcess, client: openai.OpenAI) -> None:
    client.responses.create(model=SCRIPTED, input=script("x"))
    metrics = httpx.get(gateway.url + "/metrics").text
    assert 'endpoint="responses"' in metrics


# -- durability ----------------------------------------------------------------------------------


def test_previous_response_id_survives_a_gateway_restart(triton: TritonServer, tmp_path: Path) -> None:
    """The store is a real database: a conversation continues on a restarted gateway."""
    env = {"GATEWAY_RESPONSES_STORE": f"sqlite:///{tmp_path / 'responses.db'}"}
    first_gateway = start_gateway(triton.grpc_url, tmp_path / "first.log", env=env)
    try:
        with openai.OpenAI(base_url=first_gateway.url + "/v1", api_key="x", max_retries=0) as sdk:
            first = sdk.responses.create(model=SCRIPTED, input=script("remembered"))
    finally:
        stop_gateway(first_gateway)
    time.sleep(0.2)
    second_gateway = start_gateway(triton.grpc_url, tmp_path / "second.log", env=env)
    try:
        with openai.OpenAI(base_url=second_gateway.url + "/v1", api_key="x", max_retries=0) as sdk:
            assert sdk.responses.retrieve(first.id).output_text == "remembered"
            second = sdk.responses.create(model=SCRIPTED, previous_response_id=first.id, input=ECHO)
            assert "remembered<|im_end|>" in prompt_of(second)
    finally:
        stop_gateway(second_gateway)


# -- clients that speak the Responses API by default ----------------------------------------------


class Forecast(BaseModel):
    """Bounded (no extra keys): the random model fills whatever room a schema leaves it."""

    model_config = ConfigDict(extra="forbid")
    city: Literal["Paris", "Tokyo", "Lima"]
    sunny: bool
    days: int = Field(ge=1, le=7)


def test_sdk_parse_returns_the_pydantic_model(client: openai.OpenAI) -> None:
    for seed in range(3):
        parsed = client.responses.parse(
            model=MODEL, input="Weather?", text_format=Forecast, max_output_tokens=64, extra_body={"seed": seed}
        )
        assert isinstance(parsed.output_parsed, Forecast)


def test_langchain_on_the_responses_api(gateway: GatewayProcess) -> None:
    model = ChatOpenAI(
        model=MODEL,
        base_url=gateway.url + "/v1",
        api_key="unused",
        use_responses_api=True,
        max_retries=0,  # type: ignore[arg-type]
    )
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": Forecast.model_json_schema()}}
    message = model.bind_tools([tool], tool_choice="get_weather").invoke("Weather in Paris?")
    assert isinstance(message, AIMessage)
    (call,) = message.tool_calls
    assert call["name"] == "get_weather" and Forecast.model_validate(call["args"])
    streamed = None
    for chunk in model.bind_tools([tool], tool_choice="get_weather").stream("Weather in Paris?"):
        streamed = chunk if streamed is None else streamed + chunk
    assert streamed is not None and Forecast.model_validate(streamed.tool_calls[0]["args"])  # type: ignore[attr-defined]
    forecast = model.with_structured_output(Forecast, method="json_schema").invoke("Weather?")
    assert isinstance(forecast, Forecast)


def test_two_gateways_share_one_postgresql_store(triton: TritonServer, tmp_path: Path) -> None:
    """Several replicas, one setting: a conversation started on one gateway continues on another,
    and a deletion on one is seen by the other, through a real PostgreSQL the test starts."""
    server = start_postgres()
    gateways: list[GatewayProcess] = []
    try:
        env = {"GATEWAY_RESPONSES_STORE": server.url()}
        gateways = [start_gateway(triton.grpc_url, tmp_path / f"replica-{i}.log", env=env) for i in range(2)]
        one, two = (openai.OpenAI(base_url=g.url + "/v1", api_key="x", max_retries=0) for g in gateways)
        with one, two:
            first = one.responses.create(model=SCRIPTED, input=script("shared memory"))
            assert two.responses.retrieve(first.id).output_text == "shared memory"
            second = two.responses.create(model=SCRIPTED, previous_response_id=first.id, input=ECHO)
            assert "shared memory<|im_end|>" in prompt_of(second)
            assert one.responses.retrieve(second.id).previous_response_id == first.id
            two.responses.delete(first.id)
            with pytest.raises(openai.NotFoundError):
                one.responses.retrieve(first.id)
    finally:
        for gateway in gateways:
            stop_gateway(gateway)
        stop_postgres(server)
