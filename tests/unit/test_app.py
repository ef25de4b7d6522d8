"""The HTTP edge against an in-memory backend: error shapes, request bodies refused as FastAPI reads
them, SSE framing through the middleware chain, cancellation on stop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.app import create_app
from gateway.config import Settings
from gateway.errors import BackendUnavailableError, InvalidRequestError
from tests.fakes import ScriptedBackend, text_chunks

pytestmark = pytest.mark.anyio

WEIGHTS = Path(__file__).resolve().parents[2] / "triton_models" / "weights" / "tiny-llm"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_repo(tmp_path: Path, name: str = "m", adapters: tuple[str, ...] = ()) -> Path:
    version = tmp_path / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (version / "model.json").write_text(json.dumps({"model": str(WEIGHTS), "max_model_len": 64}))
    (version / "multi_lora.json").write_text(json.dumps({a: f"/adapters/{a}" for a in adapters}))
    return tmp_path


async def call(backend: ScriptedBackend, repo: Path, method: str, path: str, **kwargs: object) -> httpx.Response:
    app = create_app(Settings(model_repository=[repo], first_response_wait=1.0), backend=backend)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.request(method, path, **kwargs)  # type: ignore[arg-type]


async def asgi_call(
    app: Any, path: str, messages: list[Message], leave_after: float | None = None
) -> tuple[int, list[Message]]:
    """One POST as a server makes it: ``messages`` from ``receive`` (the body's pieces), then a
    disconnect after ``leave_after`` seconds (None: never); returns the status and every message
    the app sent."""
    queue = list(messages)

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        if leave_after is None:
            await asyncio.Event().wait()
        await asyncio.sleep(leave_after or 0.0)
        return {"type": "http.disconnect"}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    await app(scope, receive, send)
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert len(starts) == 1
    return starts[0]["status"], sent


def body_message(body: dict[str, Any]) -> Message:
    return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}


def chat(**extra: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


def sse_events(body: str) -> list[str]:
    assert body.endswith("\n\n")
    events = [e for e in body.split("\n\n") if e]
    for event in events:
        for line in event.split("\n"):
            assert line.startswith("data: ") or line.startswith(":"), line
    return [e[len("data: ") :] for e in events if e.startswith("data: ")]


async def test_stream_frames_role_content_finish_done(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"he", b"llo", reason="length"))
    response = await call(
        backend, make_repo(tmp_path), "POST", "/v1/chat/completions", json=chat(stream=True, max_tokens=2)
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "hello"
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert backend.requests[0].sampling["max_tokens"] == 2


async def test_include_usage_adds_one_last_chunk_and_nulls_elsewhere(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b", prompt_tokens=7))
    response = await call(
        backend,
        make_repo(tmp_path),
        "POST",
        "/v1/chat/completions",
        json=chat(stream=True, stream_options={"include_usage": True}),
    )
    chunks = [json.loads(e) for e in sse_events(response.text)[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 2,
        "total_tokens": 9,
    }
    assert all(c["usage"] is None for c in chunks[:-1])


async def test_stop_string_ends_stream_and_closes_backend_early(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"ab", b"cE", b"ND", b"more", b"more", reason="length"), delay=0.05)
    response = await call(
        backend, make_repo(tmp_path), "POST", "/v1/chat/completions", json=chat(stream=True, stop="END")
    )
    chunks = [json.loads(e) for e in sse_events(response.text)[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "abc"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert backend.closed_early == 1 and backend.finished == 0


async def test_error_before_first_response_gets_a_status_code(tmp_path: Path) -> None:
    backend = ScriptedBackend([BackendUnavailableError("Triton is down", headers={"Retry-After": "1"})])
    response = await call(backend, make_repo(tmp_path), "POST", "/v1/chat/completions", json=chat(stream=True))
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["message"] == "Triton is down"


async def test_error_mid_stream_is_one_error_event_then_end(tmp_path: Path) -> None:
    backend = ScriptedBackend([*text_chunks(b"a", b"b")[:1], InvalidRequestError("boom")])
    response = await call(backend, make_repo(tmp_path), "POST", "/v1/chat/completions", json=chat(stream=True))
    events = sse_events(response.text)
    assert json.loads(events[-1]) == {
        "error": {"message": "boom", "type": "invalid_request_error", "param": None, "code": None}
    }
    assert "[DONE]" not in events


async def test_non_streaming_response_has_usage_and_finish_reason(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"\xf0\x9f", b"\x99\x82!", reason="stop", prompt_tokens=4))
    response = await call(backend, make_repo(tmp_path), "POST", "/v1/chat/completions", json=chat())
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "🙂!"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        (chat(temperature=5), "temperature"),
        (chat(n=0), "n"),
        (chat(messages=[]), "messages"),
        (chat(messages=[{"role": "wizard", "content": "x"}]), "messages.0.role"),
        (chat(logit_bias={"abc": 1}), "logit_bias"),
        (chat(max_tokens=0), "max_tokens"),
    ],
)
async def test_invalid_fields_are_400_naming_the_param(tmp_path: Path, payload: dict[str, object], param: str) -> None:
    response = await call(ScriptedBackend(), make_repo(tmp_path), "POST", "/v1/chat/completions", json=payload)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert set(error) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("path", "payload", "param"),
    [
        ("/v1/completions", {"model": "m", "prompt": ""}, "prompt"),
        ("/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 3, "min_tokens": 5}, "min_tokens"),
        ("/v1/completions", {"model": "m", "prompt": "hi", "stop_token_ids": [99999]}, "stop_token_ids"),
        ("/v1/completions", {"model": "m", "prompt": "hi", "stop_token_ids": [-1]}, "stop_token_ids"),
        ("/v1/completions", {"model": "m", "prompt": "hi", "logit_bias": {"99999": 5}}, "logit_bias"),
        ("/v1/completions", {"model": "m", "prompt": "hi", "seed": 2**64}, "seed"),
        ("/v1/chat/completions", chat(tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice"),
    ],
)
async def test_what_vllm_refuses_is_400_before_the_backend(
    tmp_path: Path, path: str, payload: dict[str, object], param: str
) -> None:
    backend = ScriptedBackend(text_chunks(b"ok"))
    response = await call(backend, make_repo(tmp_path), "POST", path, json=payload)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert backend.requests == []


async def test_logit_bias_is_a_400_for_a_model_on_the_vllm_backend(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    response = await call(
        ScriptedBackend(platform="vllm"), repo, "POST", "/v1/chat/completions", json=chat(logit_bias={"5": 1})
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "logit_bias"
    backend = ScriptedBackend(text_chunks(b"ok"), platform="python")
    response = await call(backend, repo, "POST", "/v1/chat/completions", json=chat(logit_bias={"5": 1}))
    assert response.status_code == 200
    assert backend.requests[0].sampling["logit_bias"] == {"5": 1.0}


async def test_unknown_fields_are_ignored_not_422(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"ok"))
    response = await call(
        backend,
        make_repo(tmp_path),
        "POST",
        "/v1/chat/completions",
        json=chat(store=True, metadata={"a": "b"}, some_future_field=[1, 2]),
    )
    assert response.status_code == 200


async def test_malformed_json_is_400(tmp_path: Path) -> None:
    response = await call(
        ScriptedBackend(),
        make_repo(tmp_path),
        "POST",
        "/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_a_body_not_sent_as_json_is_a_400_that_says_so(
    tmp_path: Path, path: str, content_type: str | None
) -> None:
    body = json.dumps({**chat(), "prompt": "hi"}).encode()
    headers = {"content-type": content_type} if content_type else {}
    backend = ScriptedBackend(text_chunks(b"ok"))
    response = await call(backend, make_repo(tmp_path), "POST", path, content=body, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "unsupported_media_type"
    assert "must be JSON, sent with 'Content-Type: application/json'" in error["message"]
    assert (repr(content_type) if content_type else "got none") in error["message"]
    assert backend.requests == []


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "Application/JSON", "application/merge+json"]
)
async def test_json_content_types_with_parameters_or_a_suffix_are_json(tmp_path: Path, content_type: str) -> None:
    body = json.dumps(chat()).encode()
    response = await call(
        ScriptedBackend(text_chunks(b"ok")), make_repo(tmp_path), "POST", "/v1/chat/completions",
        content=body, headers={"content-type": content_type},
    )  # fmt: skip
    assert response.status_code == 200


@pytest.mark.parametrize(("content", "message"), [(b"", "is empty"), (b"[1, 2]", "must be a JSON object")])
async def test_an_empty_or_non_object_json_body_is_a_clear_400(tmp_path: Path, content: bytes, message: str) -> None:
    response = await call(
        ScriptedBackend(), make_repo(tmp_path), "POST", "/v1/chat/completions",
        content=content, headers={"content-type": "application/json"},
    )  # fmt: skip
    assert response.status_code == 400
    assert message in response.json()["error"]["message"] and response.json()["error"]["param"] is None


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses"])
@pytest.mark.parametrize(
    ("raw", "content_type", "message", "code"),
    [
        (b'{"model": "m", "prompt": "hi"}', "text/plain", "The request body must be JSON", "unsupported_media_type"),
        (b"{}", None, "The request body must be JSON", "unsupported_media_type"),
        (b"", "application/json", "The request body is empty: it must be a JSON object.", "invalid_json"),
        (b"{", "application/json", "We could not parse the JSON body of your request.", "invalid_json"),
        (b"\xff", "application/json", "There was an error parsing the body", None),
        (b"[" * 5000 + b"]" * 5000, "application/json", "There was an error parsing the body", None),
        (b"null", "application/json", "The request body must be a JSON object.", "invalid_type"),
        (b"[]", "application/json", "The request body must be a JSON object.", "invalid_type"),
    ],
)
async def test_bodies_that_are_not_a_json_object_are_400s_in_openais_shape(
    tmp_path: Path, path: str, raw: bytes, content_type: str | None, message: str, code: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    backend = ScriptedBackend(text_chunks(b"ok"))
    response = await call(backend, make_repo(tmp_path), "POST", path, content=raw, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith(message)
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, code)
    assert backend.requests == []


async def test_the_first_invalid_field_is_named_and_the_others_counted(tmp_path: Path) -> None:
    body = {"model": "m", "prompt": "hi", "stream_options": "x", "n": 0}
    response = await call(ScriptedBackend(), make_repo(tmp_path), "POST", "/v1/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "n"
    assert error["message"] == "Invalid value for 'n': Input should be greater than or equal to 1 (and 1 more error)"


async def test_json_is_read_as_the_stdlib_reads_it(tmp_path: Path) -> None:
    """Integers beyond 64 bits stay exact (read as a float, this seed would round into range);
    UTF-16 with a BOM parses."""
    repo = make_repo(tmp_path)
    headers = {"content-type": "application/json"}
    beyond = b'{"model": "m", "prompt": "hi", "seed": -9223372036854775809}'
    response = await call(ScriptedBackend(), repo, "POST", "/v1/completions", content=beyond, headers=headers)
    assert response.status_code == 400 and response.json()["error"]["param"] == "seed"
    backend = ScriptedBackend(text_chunks(b"ok"))
    utf16 = '{"model": "m", "prompt": "hi", "max_tokens": 3}'.encode("utf-16")
    response = await call(backend, repo, "POST", "/v1/completions", content=utf16, headers=headers)
    assert response.status_code == 200 and backend.requests[0].sampling["max_tokens"] == 3


async def test_a_body_in_pieces_is_read_whole_and_a_client_leaving_while_sending_it_is_a_400(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"ok"))
    app = create_app(Settings(model_repository=[make_repo(tmp_path)]), backend=backend)
    raw = json.dumps(chat(max_tokens=1)).encode()
    pieces = [raw[:10], b"", raw[10:]]
    whole: list[Message] = [{"type": "http.request", "body": p, "more_body": i < 2} for i, p in enumerate(pieces)]
    async with app.router.lifespan_context(app):
        assert (await asgi_call(app, "/v1/chat/completions", whole))[0] == 200
        status, sent = await asgi_call(app, "/v1/chat/completions", [{"type": "http.request"}])
        assert status == 400 and b"is empty" in sent[-1]["body"]
        left: list[Message] = [{"type": "http.request", "body": raw[:10], "more_body": True}]
        status, sent = await asgi_call(app, "/v1/chat/completions", left, leave_after=0.0)
    assert status == 400
    assert json.loads(sent[-1]["body"])["error"]["message"] == "There was an error parsing the body"
    assert len(backend.requests) == 1


class RecordingSend:
    """Pure ASGI middleware that wraps ``send``, as gzip or a tracer does, and records every message."""

    def __init__(self, app: ASGIApp, seen: list[Message]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def recording(message: Message) -> None:
            self.seen.append(message)
            await send(message)

        await self.app(scope, receive, recording)


@pytest.mark.parametrize(
    ("path", "body", "last"),
    [
        ("/v1/chat/completions", chat(stream=True, max_tokens=3), b"data: [DONE]\n\n"),
        ("/v1/responses", {"model": "m", "input": "hi", "stream": True}, b"event: response.completed\n"),
        (
            "/v1/messages",
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "stream": True},
            b"event: message_stop\n",
        ),
    ],
)
async def test_a_middleware_wrapping_send_sees_every_body_frame_of_a_stream(
    tmp_path: Path, path: str, body: dict[str, Any], last: bytes
) -> None:
    seen: list[Message] = []
    backend = ScriptedBackend(text_chunks(b"a", b"b", b"c"), delay=0.01)
    app = create_app(Settings(model_repository=[make_repo(tmp_path)]), backend=backend)
    app.add_middleware(RecordingSend, seen=seen)
    async with app.router.lifespan_context(app):
        status, sent = await asyncio.wait_for(asgi_call(app, path, [body_message(body)]), 5.0)
    assert status == 200
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert len(bodies) >= 3 and last in bodies[-1]["body"] and not bodies[-1].get("more_body", False)
    assert seen == sent  # every frame, in order, and nothing around the middleware


async def test_unset_fields_sent_as_null_are_defaults_not_400s(tmp_path: Path) -> None:
    nulls = dict.fromkeys(("n", "stream", "logprobs", "stop", "seed", "stream_options", "top_logprobs", "tools"))
    backend = ScriptedBackend(text_chunks(b"ok"))
    response = await call(backend, make_repo(tmp_path), "POST", "/v1/chat/completions", json=chat(**nulls))
    assert response.status_code == 200 and response.json()["object"] == "chat.completion"
    legacy = dict.fromkeys(("n", "stream", "logprobs", "echo", "suffix", "best_of", "stream_options"))
    response = await call(
        backend, make_repo(tmp_path), "POST", "/v1/completions", json={"model": "m", "prompt": "hi", **legacy}
    )
    assert response.status_code == 200 and response.json()["choices"][0]["text"] == "ok"


async def test_unknown_route_is_openai_shaped_404(tmp_path: Path) -> None:
    response = await call(ScriptedBackend(), make_repo(tmp_path), "GET", "/v1/nope")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_models_list_adapters_with_parent(tmp_path: Path) -> None:
    response = await call(ScriptedBackend(), make_repo(tmp_path, adapters=("x", "y")), "GET", "/v1/models")
    data = {m["id"]: m for m in response.json()["data"]}
    assert set(data) == {"m", "m:x", "m:y"}
    assert data["m:x"]["parent"] == "m" and data["m"]["parent"] is None


async def test_adapter_model_id_sends_lora_name(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"ok"))
    await call(backend, make_repo(tmp_path, adapters=("x",)), "POST", "/v1/chat/completions", json=chat(model="m:x"))
    await call(
        backend, make_repo(tmp_path / "b", adapters=("x",)), "POST", "/v1/chat/completions", json=chat(model="x")
    )
    assert [r.sampling.get("lora_name") for r in backend.requests] == ["x", "x"]
    assert all(r.model == "m" for r in backend.requests)


async def test_unknown_adapter_is_404_model_not_found(tmp_path: Path) -> None:
    response = await call(
        ScriptedBackend(),
        make_repo(tmp_path, adapters=("x",)),
        "POST",
        "/v1/chat/completions",
        json=chat(model="m:zzz"),
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


async def test_prompt_over_context_is_400_context_length_exceeded(tmp_path: Path) -> None:
    response = await call(
        ScriptedBackend(),
        make_repo(tmp_path),
        "POST",
        "/v1/chat/completions",
        json=chat(messages=[{"role": "user", "content": "word " * 200}]),
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


async def test_default_max_tokens_is_the_room_left_in_context(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"ok"))
    await call(backend, make_repo(tmp_path), "POST", "/v1/chat/completions", json=chat())
    sent = backend.requests[0].sampling["max_tokens"]
    assert 0 < sent < 64


async def test_legacy_completions_default_to_16_tokens_unless_set_otherwise(tmp_path: Path) -> None:
    repo, body = make_repo(tmp_path), {"model": "m", "prompt": "hi"}
    backend = ScriptedBackend(text_chunks(b"ok"))
    await call(backend, repo, "POST", "/v1/completions", json=body)
    assert backend.requests[0].sampling["max_tokens"] == 16
    backend = ScriptedBackend(text_chunks(b"ok"))
    app = create_app(Settings(model_repository=[repo], completions_default_max_tokens=0), backend=backend)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            await client.post("/v1/completions", json=body)
    assert 16 < backend.requests[0].sampling["max_tokens"] < 64  # the room the context leaves
    backend = ScriptedBackend(text_chunks(b"ok"))
    app = create_app(Settings(model_repository=[repo], max_tokens_limit=8), backend=backend)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            answered = await client.post("/v1/completions", json=body)
    assert answered.status_code == 200 and backend.requests[0].sampling["max_tokens"] == 8  # within the cap


async def test_request_id_is_echoed_and_sent_to_backend(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"ok"))
    response = await call(
        backend, make_repo(tmp_path), "POST", "/v1/chat/completions", json=chat(), headers={"X-Request-Id": "abc-123"}
    )
    assert response.headers["x-request-id"] == "abc-123"
    assert backend.requests[0].request_id == "abc-123"


async def test_readiness_reflects_backend(tmp_path: Path) -> None:
    assert (await call(ScriptedBackend(), make_repo(tmp_path), "GET", "/health/ready")).status_code == 200
    down = await call(ScriptedBackend(ready=False), make_repo(tmp_path), "GET", "/health/ready")
    assert down.status_code == 503 and down.json()["error"]["type"] == "service_unavailable"


async def test_per_model_limits_override_the_global_ones(tmp_path: Path) -> None:
    settings = Settings(
        model_repository=[make_repo(tmp_path)],
        max_tokens_limit=50,
        model_limits={"m": {"max_tokens_limit": 4, "max_concurrent_requests": 1, "max_queue_size": 0}},
    )
    backend = ScriptedBackend(text_chunks(b"ok"), delay=0.3)
    app = create_app(settings, backend=backend)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            too_many = await client.post("/v1/chat/completions", json=chat(max_tokens=5))
            assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "max_tokens"
            first = asyncio.create_task(client.post("/v1/chat/completions", json=chat(max_tokens=4)))
            await asyncio.sleep(0.1)
            second = await client.post("/v1/chat/completions", json=chat(max_tokens=4))
            assert second.status_code == 429  # one slot, no queue, for this model only
            assert (await first).status_code == 200
    assert settings.limits_for("other") == (256, 1024, 50)


async def test_each_request_is_counted_once_with_how_it_ended(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"ab", b"cEND", b"more", reason="length"))
    app = create_app(Settings(model_repository=[make_repo(tmp_path)]), backend=backend)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            await client.post("/v1/chat/completions", json=chat(stream=True, stop="END"))
            await client.post("/v1/chat/completions", json=chat(stop="END"))
            app.state.components.service.draining = True
            refused = await client.post("/v1/chat/completions", json=chat())
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "shutting_down"
            metrics = (await client.get("/metrics")).text
    counted = [line for line in metrics.splitlines() if line.startswith("gateway_requests_total{")]
    assert sorted(line.rsplit(" ", 1)[1] for line in counted) == ["1.0", "1.0", "1.0"]
    assert any('status="200",stream="true"' in line for line in counted)
    assert any('status="200",stream="false"' in line for line in counted)
    assert any('status="503"' in line for line in counted)
    assert 'gateway_cancellations_total{reason="stop_string"} 2.0' in metrics


# -- what a key learns of the models outside its list ---------------------------------------------


async def keyed_calls(
    tmp_path: Path, requests: list[tuple[str, str, dict[str, Any]]], **settings: Any
) -> list[httpx.Response]:
    from gateway.keys.policy import hash_key

    keys = tmp_path / "keys.toml"
    keys.write_text(f'[[key]]\nname = "team"\nsha256 = "{hash_key("sk-team")}"\nmodels = ["m"]\n')
    repo = make_repo(make_repo(tmp_path, "m"), "secret", adapters=("a", "b"))
    backend = ScriptedBackend(text_chunks(b"ok"), models=("m", "secret"))
    app = create_app(Settings(model_repository=[repo], api_key_policy_file=keys, **settings), backend=backend)
    headers = {"Authorization": "Bearer sk-team"}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as client:
            return [await client.request(method, path, **kwargs) for method, path, kwargs in requests]


async def test_an_adapter_of_a_model_outside_the_keys_list_is_the_404_of_a_model_nothing_serves(
    tmp_path: Path,
) -> None:
    def ask(model: str) -> tuple[str, str, dict[str, Any]]:
        return (
            "POST",
            "/v1/chat/completions",
            {"json": {"model": model, "messages": [{"role": "user", "content": "x"}]}},
        )

    hidden, unknown, bare = await keyed_calls(tmp_path, [ask("secret:x"), ask("ghost:x"), ask("a")])
    assert hidden.status_code == unknown.status_code == bare.status_code == 404
    assert hidden.content.replace(b"secret:x", b"ID") == unknown.content.replace(b"ghost:x", b"ID")
    assert b"secret" not in bare.content.replace(b"'a'", b"")
    assert b"Adapters" not in hidden.content


async def test_tokenize_without_a_model_names_only_the_keys_models(tmp_path: Path) -> None:
    (tokenized,) = await keyed_calls(tmp_path, [("POST", "/tokenize", {"json": {"prompt": "hi"}})])
    assert tokenized.status_code == 200, "the key may use one model: it is the default"
    assert tokenized.json()["count"] > 0
    repo = make_repo(make_repo(tmp_path / "open", "m"), "secret")
    app = create_app(Settings(model_repository=[repo]), backend=ScriptedBackend([], models=("m", "secret")))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            response = await client.post("/tokenize", json={"prompt": "hi"})
    assert response.status_code == 400 and "m, secret" in response.json()["error"]["message"]


async def test_input_tokens_without_a_model_takes_the_keys_one_model_and_names_no_other(tmp_path: Path) -> None:
    (counted,) = await keyed_calls(tmp_path, [("POST", "/v1/responses/input_tokens", {"json": {"input": "hi"}})])
    assert counted.status_code == 200, counted.text
    assert counted.json()["input_tokens"] > 0 and b"secret" not in counted.content


# -- traces begin after the key check --------------------------------------------------------------


async def test_only_requests_with_a_key_are_traced_and_spans_are_named_by_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functools import partial

    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import gateway.app
    from gateway.tracing import Tracing

    memory = InMemorySpanExporter()
    monkeypatch.setattr(gateway.app, "Tracing", partial(Tracing, exporter=memory))
    chat_body = {"json": chat(), "headers": {"traceparent": f"00-{0xABC:032x}-{0xDEF:016x}-01"}}
    responses = await keyed_calls(
        tmp_path,
        [
            ("GET", "/v1/models/secret", {"headers": {"Authorization": ""}}),  # no key: 401
            ("GET", "/v1/random/path/1", {"headers": {"Authorization": "Bearer nope"}}),  # wrong key: 401
            ("GET", "/v1/models/secret", {}),
            ("GET", "/v1/random/path/2", {}),
            ("POST", "/v1/chat/completions", {"json": {"model": 1}}),  # a 400 before planning
            ("POST", "/v1/chat/completions", chat_body),
        ],
        otlp_traces_endpoint="http://127.0.0.1:9/v1/traces",
    )
    assert [r.status_code for r in responses] == [401, 401, 404, 404, 400, 200]
    spans = sorted(memory.get_finished_spans(), key=lambda span: span.start_time or 0)
    servers = [span for span in spans if span.kind.name == "SERVER"]
    assert [span.name for span in servers] == [
        "GET /v1/models/{model_id:path}",
        "GET",
        "POST /v1/chat/completions",
        "chat m",
    ]
    assert servers[-1].parent is None and servers[-1].context.trace_id != 0xABC, "a keyed gateway trusts no client"
