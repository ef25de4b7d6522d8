"""``/v1/responses`` against an in-memory backend: the event sequence, the object, the store, the
SDK's own stream assembly (``ResponseStreamState``) fed our bytes, all with warnings as errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai._models import construct_type
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from gateway.app import create_app
from gateway.config import Settings
from gateway.errors import BackendError
from tests.fakes import ScriptedBackend, text_chunks
from tests.unit.test_app import WEIGHTS

pytestmark = pytest.mark.anyio

CALL = '<tool_call>{"name": "get_time", "arguments": {"tz": "UTC"}}</tool_call>'
TOOLS = [{"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_repo(tmp_path: Path) -> Path:
    """A model ``m`` with tiny-llm's tokenizer and template (which renders tools), 4096 tokens long."""
    version = tmp_path / "m" / "1"
    version.mkdir(parents=True, exist_ok=True)
    (version / "model.json").write_text(json.dumps({"model": str(WEIGHTS), "max_model_len": 4096}))
    return tmp_path


async def calls(
    backend: ScriptedBackend, repo: Path, *requests: tuple[str, str, dict[str, Any]]
) -> list[httpx.Response]:
    """Several requests against one app (one store)."""
    app = create_app(Settings(model_repository=[repo], first_response_wait=1.0), backend=backend)
    out = []
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            for method, path, kwargs in requests:
                out.append(await client.request(method, path, **kwargs))
    return out


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **extra}


def events_of(raw: str) -> list[dict[str, Any]]:
    """The SSE events: every one named, its name equal to its JSON's type."""
    out = []
    for block in raw.split("\n\n"):
        if not block or block.startswith(":"):
            continue
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), block
        event = json.loads(data[len("data: ") :])
        assert event["type"] == name[len("event: ") :]
        out.append(event)
    return out


def assemble(events: list[dict[str, Any]]) -> Any:
    """What ``client.responses.stream()`` makes of them."""
    state: ResponseStreamState[None] = ResponseStreamState(input_tools=TOOLS, text_format=omit)  # type: ignore[arg-type]
    for event in events:
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=event))  # type: ignore[arg-type]
    return state._completed_response


async def test_streamed_text_has_the_documented_sequence_and_assembles_in_the_sdk(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"he", b"llo", prompt_tokens=4))
    (response,) = await calls(backend, make_repo(tmp_path), ("POST", "/v1/responses", {"json": body(stream=True)}))
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = events_of(response.text)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    item_id = events[2]["item"]["id"]
    assert item_id.startswith("msg_")
    assert all(e["item_id"] == item_id for e in events[3:8])
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == "hello"
    assert final["usage"]["input_tokens"] == 4 and final["usage"]["output_tokens"] == 2
    assembled = assemble(events)
    assert assembled.output_text == "hello" and assembled.id == final["id"]


async def test_stream_and_object_agree_and_the_object_is_stored(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"he", b"llo"))
    created, streamed = await calls(
        backend,
        make_repo(tmp_path),
        ("POST", "/v1/responses", {"json": body(metadata={"k": "v"})}),
        ("POST", "/v1/responses", {"json": body(stream=True)}),
    )
    whole = created.json()
    assert whole["object"] == "response" and whole["status"] == "completed" and whole["metadata"] == {"k": "v"}
    final = events_of(streamed.text)[-1]["response"]
    assert [item["content"] for item in whole["output"]] == [item["content"] for item in final["output"]]


async def test_the_cap_is_incomplete_with_the_reason(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b", reason="length"))
    whole, streamed = await calls(
        backend,
        make_repo(tmp_path),
        ("POST", "/v1/responses", {"json": body(max_output_tokens=2)}),
        ("POST", "/v1/responses", {"json": body(max_output_tokens=2, stream=True)}),
    )
    assert whole.json()["status"] == "incomplete"
    assert whole.json()["incomplete_details"] == {"reason": "max_output_tokens"}
    assert whole.json()["output"][0]["status"] == "incomplete"
    events = events_of(streamed.text)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_a_tool_call_is_a_function_call_item_after_the_text(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"Let me see. ", CALL.encode()))
    (response,) = await calls(
        backend, make_repo(tmp_path), ("POST", "/v1/responses", {"json": body(stream=True, tools=TOOLS)})
    )
    events = events_of(response.text)
    kinds = [e["type"] for e in events]
    assert kinds[kinds.index("response.function_call_arguments.delta") - 1] == "response.output_item.added"
    call = events[-1]["response"]["output"][1]
    assert call["type"] == "function_call" and call["name"] == "get_time" and call["call_id"].startswith("call_")
    assert json.loads(call["arguments"]) == {"tz": "UTC"} and call["id"].startswith("fc_")
    assembled = assemble(events)
    assert assembled.output[1].arguments == call["arguments"]
    assert assembled.output_text == "Let me see. "


async def test_error_mid_stream_is_response_failed_with_the_error_object(tmp_path: Path) -> None:
    backend = ScriptedBackend([*text_chunks(b"a", b"b")[:1], BackendError("boom")])
    (response,) = await calls(backend, make_repo(tmp_path), ("POST", "/v1/responses", {"json": body(stream=True)}))
    events = events_of(response.text)
    assert events[-1]["type"] == "response.failed"
    failed = events[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"message": "boom", "type": "server_error", "param": None, "code": "backend_error"}
    assert failed["output"][0]["content"][0]["text"] == "a"


async def test_unknown_ids_are_404_and_an_unknown_previous_id_is_400(tmp_path: Path) -> None:
    listed, got, deleted, continued = await calls(
        ScriptedBackend(text_chunks(b"x")),
        make_repo(tmp_path),
        ("GET", "/v1/responses/resp_nope/input_items", {}),
        ("GET", "/v1/responses/resp_nope", {}),
        ("DELETE", "/v1/responses/resp_nope", {}),
        ("POST", "/v1/responses", {"json": body(previous_response_id="resp_nope")}),
    )
    for response in (listed, got, deleted):
        assert response.status_code == 404
        assert response.json()["error"]["message"] == "Response with id 'resp_nope' not found."
    assert continued.status_code == 400
    assert continued.json()["error"]["code"] == "previous_response_not_found"
    assert continued.json()["error"]["param"] == "previous_response_id"


async def test_another_keys_responses_are_not_found(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"x"))
    settings = Settings(model_repository=[make_repo(tmp_path)], api_keys="alice,bob")
    app = create_app(settings, backend=backend)
    alice, bob = ({"authorization": f"Bearer {key}"} for key in ("alice", "bob"))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            mine = (await client.post("/v1/responses", json=body(), headers=alice)).json()
            assert (await client.get(f"/v1/responses/{mine['id']}", headers=alice)).status_code == 200
            assert (await client.get(f"/v1/responses/{mine['id']}", headers=bob)).status_code == 404
            assert (await client.delete(f"/v1/responses/{mine['id']}", headers=bob)).status_code == 404
            theirs = await client.post("/v1/responses", json=body(previous_response_id=mine["id"]), headers=bob)
            assert theirs.status_code == 400
            assert (await client.get(f"/v1/responses/{mine['id']}", headers=alice)).status_code == 200


async def test_storing_turned_off_keeps_nothing_and_says_so(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"x"))
    settings = Settings(model_repository=[make_repo(tmp_path)], responses_store_enabled=False)
    app = create_app(settings, backend=backend)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            created = (await client.post("/v1/responses", json=body())).json()
            assert created["store"] is False
            missing = await client.get(f"/v1/responses/{created['id']}")
            assert missing.status_code == 404 and "turned off" in missing.json()["error"]["message"]
            continued = await client.post("/v1/responses", json=body(previous_response_id=created["id"]))
            assert continued.status_code == 400 and "turned off" in continued.json()["error"]["message"]


async def test_a_chain_renders_history_and_the_store_serves_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    backend = ScriptedBackend(text_chunks(b"first answer"))
    app = create_app(Settings(model_repository=[repo], first_response_wait=1.0), backend=backend)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            first = (await client.post("/v1/responses", json=body(input="one", instructions="be brief"))).json()
            second = await client.post("/v1/responses", json=body(input="two", previous_response_id=first["id"]))
            assert second.status_code == 200, second.text
            prompt = backend.requests[-1].prompt
            assert prompt.index("one") < prompt.index("first answer") < prompt.index("two")
            assert "be brief" not in prompt  # instructions are not carried over
            assert (await client.get(f"/v1/responses/{first['id']}")).json() == first
            items = (await client.get(f"/v1/responses/{first['id']}/input_items")).json()
            assert items["object"] == "list" and items["data"][0]["content"] == [{"type": "input_text", "text": "one"}]
            assert (await client.delete(f"/v1/responses/{first['id']}")).json() == {
                "id": first["id"],
                "object": "response",
                "deleted": True,
            }
            again = await client.post(
                "/v1/responses", json=body(input="three", previous_response_id=second.json()["id"])
            )
            assert again.status_code == 400 and first["id"] in again.json()["error"]["message"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"background": True, "store": False}, "background"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
        ({"tools": [{"type": "custom", "name": "patch"}]}, "tools.0.type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "x"}]}]},
            "input.0.content.0.type",
        ),
        ({"input": [{"type": "reasoning", "summary": "no"}]}, "input.0.summary"),
        ({"input": [{"type": "computer_call"}]}, "input.0.type"),
        ({"input": []}, "input"),
        ({"tools": [{"type": "function", "name": "has space"}]}, "tools.0.name"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"tool_choice": {"type": "file_search"}, "tools": TOOLS}, "tool_choice.type"),
        ({"truncation": "auto"}, "truncation"),
        ({"metadata": {"k" * 65: "v"}}, "metadata"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
        ({"include": ["message.output_text.logprobs"]}, "include.0"),
    ],
)
async def test_unsupported_or_bad_fields_are_a_400_naming_the_field(
    tmp_path: Path, extra: dict[str, Any], param: str
) -> None:
    (response,) = await calls(
        ScriptedBackend(), make_repo(tmp_path), ("POST", "/v1/responses", {"json": body(**extra)})
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


async def test_empty_tools_and_auto_choice_are_no_tools(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"ok"))
    (response,) = await calls(
        backend, make_repo(tmp_path), ("POST", "/v1/responses", {"json": body(tools=[], tool_choice="auto")})
    )
    assert response.status_code == 200, response.text
