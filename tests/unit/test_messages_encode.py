"""Anthropic's Messages events and object (``anthropic/encode.py``), the errors in Anthropic's
shape by path, ``x-api-key``, and the stop string the assembly records, against an in-memory
backend where a real one is not needed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.anthropic.encode import MessageEncoder, stop_reason
from gateway.app import create_app
from gateway.config import Settings
from gateway.core.assemble import ChoiceAssembler, ChoiceEvent, Usage
from gateway.core.toolcalls import ToolCallOut
from gateway.errors import (
    BackendUnavailableError,
    GatewayError,
    InvalidRequestError,
    ModelNotFoundError,
    RateLimitError,
    anthropic_error_body,
    anthropic_status,
)
from gateway.http.errors import error_payload
from gateway.http.security import presented_key
from gateway.http.sse import event_framing
from tests.fakes import ScriptedBackend, text_chunks
from tests.unit.test_responses_edge import make_repo

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def parse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in raw.decode().split("\n\n"):
        if not frame:
            continue
        name, data = frame.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        payload = json.loads(data[6:])
        assert payload["type"] == name[7:]
        out.append((name[7:], payload))
    return out


def fold(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """A message rebuilt from its stream, as a client folds it."""
    message: dict[str, Any] = {}
    json_parts: dict[int, str] = {}
    for name, data in events:
        if name == "message_start":
            message = dict(data["message"])
            message["content"] = []
        elif name == "content_block_start":
            message["content"].append(dict(data["content_block"]))
        elif name == "content_block_delta":
            block, delta = message["content"][data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            else:
                json_parts[data["index"]] = json_parts.get(data["index"], "") + delta["partial_json"]
        elif name == "content_block_stop" and data["index"] in json_parts:
            message["content"][data["index"]]["input"] = json.loads(json_parts[data["index"]])
        elif name == "message_delta":
            message.update(data["delta"])
            message["usage"] = {**message["usage"], **data["usage"]}
    return message


def event(text: str = "", reasoning: str = "", calls: tuple[ToolCallOut, ...] | None = None) -> ChoiceEvent:
    return ChoiceEvent(0, text, None, None, calls, reasoning)


def test_thinking_text_and_a_streamed_call_stream_as_the_object_says() -> None:
    encoder = MessageEncoder("msg_1", "m", event_framing)
    raw = encoder.opening(5)
    raw += encoder.events([event(reasoning="Hmm ")])
    raw += encoder.events([event(reasoning="东京")])
    raw += encoder.events([event(text="Checking.")])
    raw += encoder.events([event(text=" Now")])
    raw += encoder.events([event(calls=(ToolCallOut(0, "call_ab", "f", '{"x": ', True, False),))])
    raw += encoder.events([event(calls=(ToolCallOut(0, "call_ab", "f", "1}", False, True),))])
    raw += encoder.events([event(calls=(ToolCallOut(1, "call_cd", "g", "{}"),))])
    closing, message = encoder.closing("tool_calls", None, Usage(5, 9))
    events = parse(raw + closing)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",  # the signature
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert message["content"] == [
        {"type": "thinking", "thinking": "Hmm 东京", "signature": hashlib.sha256("Hmm 东京".encode()).hexdigest()},
        {"type": "text", "text": "Checking. Now"},
        {"type": "tool_use", "id": "toolu_ab", "name": "f", "input": {"x": 1}},
        {"type": "tool_use", "id": "toolu_cd", "name": "g", "input": {}},
    ]
    assert message["stop_reason"] == "tool_use" and message["stop_sequence"] is None
    assert message["usage"] == {
        "input_tokens": 5,
        "output_tokens": 9,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert fold(events) == message


@pytest.mark.parametrize(
    ("finish", "stop", "called", "reason"),
    [
        ("stop", None, False, "end_turn"),
        ("stop", "END", False, "stop_sequence"),
        ("length", None, False, "max_tokens"),
        ("length", None, True, "max_tokens"),
        ("tool_calls", None, True, "tool_use"),
        ("stop", None, True, "tool_use"),  # a forced tool keeps chat's "stop"
    ],
)
def test_stop_reasons(finish: str, stop: str | None, called: bool, reason: str) -> None:
    assert stop_reason(finish, stop, called) == reason


def test_choice_assembler_records_the_stop_string_that_matched() -> None:
    choice = ChoiceAssembler(["zzz", "END", "ND!"], include_stop=False)
    assert choice.feed(b"Hello E", None) == "Hello "
    assert choice.feed(b"ND! more", None) == ""
    assert choice.finish_reason == "stop" and choice.stop_sequence == "END"
    plain = ChoiceAssembler(["END"], include_stop=False)
    plain.feed(b"done", "stop")
    assert plain.stop_sequence is None


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (ModelNotFoundError("no"), 404, "not_found_error"),
        (RateLimitError("busy"), 429, "rate_limit_error"),
        (BackendUnavailableError("down"), 529, "overloaded_error"),
        (GatewayError("bug"), 500, "api_error"),
    ],
)
def test_errors_have_anthropics_shape_on_its_paths_only(error: GatewayError, status: int, kind: str) -> None:
    assert anthropic_status(error.status_code) == status
    assert anthropic_error_body(error) == {"type": "error", "error": {"type": kind, "message": error.message}}
    assert error_payload(error, "/v1/messages/count_tokens") == (status, anthropic_error_body(error))
    assert error_payload(error, "/v1/messages") == (status, anthropic_error_body(error))
    assert error_payload(error, "/v1/messagesx")[0] == error.status_code
    assert "error" in error_payload(error, "/v1/chat/completions")[1]


def test_the_field_leads_anthropics_message() -> None:
    error = InvalidRequestError(
        "content blocks of type 'document' are not supported", param="messages.0.content.1.type"
    )
    assert anthropic_error_body(error)["error"]["message"] == (
        "messages.0.content.1.type: content blocks of type 'document' are not supported"
    )
    named = InvalidRequestError("'max_tokens' is a required property", param="max_tokens")
    assert anthropic_error_body(named)["error"]["message"] == "'max_tokens' is a required property"


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ([], None),
        ([(b"x-api-key", b" k1 ")], b"k1"),
        ([(b"authorization", b"Bearer k2"), (b"x-api-key", b"k1")], b"k2"),
        ([(b"x-api-key", b"k1"), (b"authorization", b"Basic abc")], b""),
    ],
)
def test_the_presented_key_prefers_authorization(headers: list[tuple[bytes, bytes]], key: bytes | None) -> None:
    assert presented_key(headers) == key


async def post(backend: ScriptedBackend, tmp_path: Path, body: dict[str, Any], **settings: Any) -> httpx.Response:
    app = create_app(
        Settings(model_repository=[make_repo(tmp_path)], first_response_wait=1.0, **settings), backend=backend
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})


BODY = {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}


async def test_backend_unavailable_before_the_stream_is_529_overloaded(tmp_path: Path) -> None:
    response = await post(
        ScriptedBackend([BackendUnavailableError("Triton is down")]), tmp_path, {**BODY, "stream": True}
    )
    assert response.status_code == 529
    assert response.json() == {"type": "error", "error": {"type": "overloaded_error", "message": "Triton is down"}}


async def test_a_stream_and_its_object_agree(tmp_path: Path) -> None:
    chunks = text_chunks(b"Hel", b"lo \xe4\xb8", b"\x9c", prompt_tokens=4)
    streamed = await post(ScriptedBackend(chunks), tmp_path, {**BODY, "stream": True})
    whole = await post(ScriptedBackend(chunks), tmp_path, BODY)
    message = whole.json()
    assert message["content"] == [{"type": "text", "text": "Hello 东"}]
    assert fold(parse(streamed.content)) == {**message, "id": fold(parse(streamed.content))["id"]}


async def test_missing_key_on_messages_is_anthropic_shaped_401(tmp_path: Path) -> None:
    response = await post(ScriptedBackend(text_chunks(b"a")), tmp_path, BODY, api_keys="k")
    assert response.status_code == 401
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "authentication_error"
