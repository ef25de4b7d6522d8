"""The edge guards: API keys and the request body size limit.

First each middleware around a tiny raw ASGI app that records exactly what reaches it, driven
through ``httpx.ASGITransport`` (and by hand where a client cannot produce the messages, e.g. a
disconnect mid-body); then the real ``create_app`` to pin which paths are protected and the order
of the guards."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.types import Message, Receive, Scope, Send

from gateway.app import create_app
from gateway.config import Settings
from gateway.http.security import PROBES, ApiKeyMiddleware, BodySizeLimitMiddleware
from gateway.keys.context import current_key, keys_required
from gateway.keys.policy import KeyRing, hash_key
from gateway.triton_launcher import free_port
from tests.fakes import ScriptedBackend, text_chunks

pytestmark = pytest.mark.anyio

LIMIT = 1024
WEIGHTS = Path(__file__).resolve().parents[2] / "triton_models" / "weights" / "tiny-llm"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Recorder:
    """An ASGI app that reads the whole body, records every message it received, and answers
    200 with the body's length."""

    def __init__(self) -> None:
        self.calls = 0
        self.messages: list[Message] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        body = b""
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH", "GET"):
            while True:
                message = await receive()
                self.messages.append(message)
                if message["type"] != "http.request":
                    break
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
        self.body = body
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": str(len(body)).encode()})


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


class Chunks:
    """A chunked request body (no Content-Length) that counts how much of it was pulled."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.pulled += 1
            yield chunk


def assert_openai_error(response: httpx.Response, status: int, error_type: str, code: str) -> dict[str, Any]:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == error_type
    assert body["error"]["code"] == code
    assert body["error"]["param"] is None
    return body["error"]  # type: ignore[no-any-return]


# -- API keys -------------------------------------------------------------------------------------


def guarded(open_metrics: bool = False) -> tuple[ApiKeyMiddleware, Recorder]:
    inner = Recorder()
    open_paths = PROBES | {"/metrics"} if open_metrics else PROBES
    return ApiKeyMiddleware(inner, ring=KeyRing({"sk-one", "sk-two"}, None), open_paths=open_paths), inner


async def get(app: Any, path: str, authorization: str | None = None, method: str = "GET") -> httpx.Response:
    headers = {} if authorization is None else {"Authorization": authorization}
    async with client(app) as c:
        return await c.request(method, path, headers=headers)


async def test_missing_key_is_openais_401() -> None:
    app, inner = guarded()
    response = await get(app, "/v1/models")
    error = assert_openai_error(response, 401, "authentication_error", "invalid_api_key")
    assert error["message"] == "Missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'."
    assert response.headers["www-authenticate"] == "Bearer"
    assert inner.calls == 0


@pytest.mark.parametrize(
    "authorization", ["Bearer sk-three", "Bearer sk-on", "Bearer sk-one-", "Bearer SK-ONE", "Bearer sk-one sk-two"]
)
async def test_wrong_key_is_a_401(authorization: str) -> None:
    app, inner = guarded()
    response = await get(app, "/v1/chat/completions", authorization, method="POST")
    error = assert_openai_error(response, 401, "authentication_error", "invalid_api_key")
    assert error["message"] == "Incorrect API key provided."
    assert response.headers["www-authenticate"] == "Bearer"
    assert inner.calls == 0


@pytest.mark.parametrize("authorization", ["Basic c2stb25lOg==", "Bearer", "Bearer ", "sk-one", "Token sk-one", ""])
async def test_anything_but_a_bearer_token_is_a_missing_key(authorization: str) -> None:
    app, inner = guarded()
    response = await get(app, "/v1/models", authorization)
    assert assert_openai_error(response, 401, "authentication_error", "invalid_api_key")["message"].startswith(
        "Missing API key"
    )
    assert inner.calls == 0


@pytest.mark.parametrize(
    "authorization",
    ["Bearer sk-one", "Bearer sk-two", "bearer sk-one", "BEARER sk-two", "Bearer  sk-one", "Bearer sk-one "],
)
async def test_right_key_reaches_the_app(authorization: str) -> None:
    app, inner = guarded()
    response = await get(app, "/v1/models", authorization)
    assert response.status_code == 200
    assert inner.calls == 1


@pytest.mark.parametrize("path", ["/health", "/health/live", "/health/ready"])
async def test_the_probes_answer_without_a_key_and_without_one_carry_none(path: str) -> None:
    seen: list[tuple[object, bool]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((current_key.get(), keys_required.get()))
        await Recorder()(scope, receive, send)

    guard = ApiKeyMiddleware(app, ring=KeyRing({"sk-one"}, None))
    for authorization in (None, "Bearer wrong", "Bearer sk-one"):
        assert (await get(guard, path, authorization)).status_code == 200
    assert [(key is not None, required) for key, required in seen] == [(False, True), (False, True), (True, True)]
    assert keys_required.get() is False, "reset after the request"


@pytest.mark.parametrize(
    "path",
    [
        "/v1/models",
        "/v1/models/m",
        "/v1/completions",
        "/v1/anything",
        "/v1",
        "/",
        "/docs",
        "/redoc",
        "/openapi.json",
        "/metrics",
        "/tokenize",
        "/healthz",
        "/health/ready/x",
        "/nothing/here",
    ],
)
async def test_every_other_path_is_closed_and_never_reaches_the_app(path: str) -> None:
    app, inner = guarded()
    for method in ("GET", "POST", "DELETE", "PUT", "OPTIONS"):
        assert_openai_error(await get(app, path, method=method), 401, "authentication_error", "invalid_api_key")
    assert inner.calls == 0


async def test_metrics_are_open_only_when_the_operator_opens_them() -> None:
    app, inner = guarded(open_metrics=True)
    assert (await get(app, "/metrics")).status_code == 200
    app, inner = guarded(open_metrics=False)
    assert (await get(app, "/metrics")).status_code == 401
    assert inner.calls == 0
    assert (await get(app, "/metrics", "Bearer sk-two")).status_code == 200
    assert inner.calls == 1


async def test_cors_preflight_passes_without_a_key_and_a_bare_options_does_not() -> None:
    app, inner = guarded()
    preflight = {"Origin": "https://a.example", "Access-Control-Request-Method": "POST"}
    async with client(app) as c:
        assert (await c.options("/v1/chat/completions", headers=preflight)).status_code == 200
        assert inner.calls == 1
        assert (await c.options("/v1/chat/completions", headers={"Origin": "https://a.example"})).status_code == 401
    assert inner.calls == 1


# -- body size limit ------------------------------------------------------------------------------


def limited() -> tuple[BodySizeLimitMiddleware, Recorder]:
    inner = Recorder()
    return BodySizeLimitMiddleware(inner, limit=LIMIT), inner


async def post(app: Any, content: Any, headers: dict[str, str] | None = None, method: str = "POST") -> httpx.Response:
    async with client(app) as c:
        return await c.request(method, "/v1/chat/completions", content=content, headers=headers)


async def test_content_length_over_the_limit_is_a_413_before_reading() -> None:
    app, inner = limited()
    response = await post(app, b"x" * (LIMIT + 1))
    error = assert_openai_error(response, 413, "invalid_request_error", "request_too_large")
    assert error["message"] == f"The request body is larger than the {LIMIT} bytes this gateway accepts."
    assert inner.calls == 0


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
async def test_body_exactly_at_the_limit_reaches_the_app_intact(method: str) -> None:
    app, inner = limited()
    body = bytes(range(256)) * (LIMIT // 256)
    assert len(body) == LIMIT
    response = await post(app, body, method=method)
    assert response.status_code == 200
    assert inner.body == body
    # Replayed as one message: the app never sees a partial body.
    assert inner.messages == [{"type": "http.request", "body": body, "more_body": False}]


async def test_chunked_body_over_the_limit_is_a_413_mid_stream() -> None:
    app, inner = limited()
    chunks = Chunks(b"a" * 600, b"b" * 600, b"c" * 600, b"d" * 600)
    response = await post(app, chunks)
    assert_openai_error(response, 413, "invalid_request_error", "request_too_large")
    assert inner.calls == 0
    assert chunks.pulled == 2  # stopped reading at the chunk that crossed the limit


async def test_chunked_body_exactly_at_the_limit_is_replayed_whole() -> None:
    app, inner = limited()
    chunks = Chunks(b'{"a":', b"1" * (LIMIT - 6), b"}")
    response = await post(app, chunks)
    assert response.status_code == 200
    assert response.text == str(LIMIT)
    assert inner.body == b'{"a":' + b"1" * (LIMIT - 6) + b"}"
    assert len(inner.messages) == 1 and inner.messages[0]["more_body"] is False


async def test_content_length_that_understates_the_body_is_still_counted() -> None:
    app, inner = limited()
    chunks = Chunks(b"a" * 1000, b"b" * 1000)
    response = await post(app, chunks, headers={"Content-Length": "10"})
    assert response.status_code == 413
    assert inner.calls == 0


async def test_a_content_length_that_is_not_a_number_falls_back_to_counting() -> None:
    app, inner = limited()
    assert (await post(app, Chunks(b"small"), headers={"Content-Length": "lots"})).status_code == 200
    assert inner.body == b"small"
    assert (await post(app, Chunks(b"x" * (LIMIT + 1)), headers={"Content-Length": "-1"})).status_code == 413


async def test_other_methods_pass_through_unbuffered() -> None:
    app, inner = limited()
    async with client(app) as c:
        response = await c.request("GET", "/v1/models", content=Chunks(b"x" * LIMIT, b"y" * LIMIT))
    assert response.status_code == 200
    # The app read the client's own messages, one per chunk, and nothing was limited.
    assert [m.get("body") for m in inner.messages] == [b"x" * LIMIT, b"y" * LIMIT, b""]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=400), max_size=8))
def test_any_chunking_either_replays_the_body_or_refuses_it(chunks: list[bytes]) -> None:
    app, inner = limited()
    body = b"".join(chunks)
    response = asyncio.run(post(app, Chunks(*chunks)))
    if len(body) > LIMIT:
        assert response.status_code == 413
        assert inner.calls == 0
    else:
        assert response.status_code == 200
        assert inner.body == body


async def drive(app: Any, incoming: list[Message], method: str = "POST") -> tuple[list[Message], list[Message]]:
    """Run an ASGI app on hand-made messages: (what it sent, what it pulled beyond the replay)."""
    sent: list[Message] = []
    queue = list(incoming)

    async def receive() -> Message:
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": "/v1/completions", "headers": []}
    await app(scope, receive, send)
    return sent, queue


async def test_a_client_gone_mid_body_is_shown_to_the_app() -> None:
    app, inner = limited()
    sent, _ = await drive(app, [{"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}])
    assert inner.calls == 1
    assert inner.messages == [{"type": "http.disconnect"}]
    assert sent[0]["status"] == 200


async def test_after_the_replay_the_app_reads_the_client_again() -> None:
    inner_received: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        inner_received.append(await receive())
        inner_received.append(await receive())  # e.g. waiting for a disconnect while streaming
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = BodySizeLimitMiddleware(app, limit=LIMIT)
    await drive(middleware, [{"type": "http.request", "body": b"{}", "more_body": False}])
    assert inner_received == [{"type": "http.request", "body": b"{}", "more_body": False}, {"type": "http.disconnect"}]


async def test_a_body_message_without_a_body_key_is_empty() -> None:
    app, inner = limited()
    await drive(app, [{"type": "http.request"}])
    assert inner.messages == [{"type": "http.request", "body": b"", "more_body": False}]


async def test_non_http_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])

    for middleware in (BodySizeLimitMiddleware(app, limit=1), ApiKeyMiddleware(app, KeyRing({"k"}, None))):
        await middleware({"type": "lifespan"}, None, None)  # type: ignore[arg-type]
    assert seen == ["lifespan", "lifespan"]


# -- the real app ---------------------------------------------------------------------------------


def make_repo(tmp_path: Path) -> Path:
    version = tmp_path / "m" / "1"
    version.mkdir(parents=True, exist_ok=True)
    (version / "model.json").write_text(json.dumps({"model": str(WEIGHTS), "max_model_len": 64}))
    return tmp_path


async def app_call(
    tmp_path: Path, requests: list[tuple[str, str, dict[str, Any]]], **settings: Any
) -> list[httpx.Response]:
    backend = ScriptedBackend(text_chunks(b"ok"))
    app = create_app(
        Settings(model_repository=[make_repo(tmp_path)], first_response_wait=1.0, **settings), backend=backend
    )
    async with app.router.lifespan_context(app), client(app) as c:
        return [await c.request(method, path, **kwargs) for method, path, kwargs in requests]


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
KEY = {"Authorization": "Bearer sk-real"}


async def test_real_app_guards_v1_and_leaves_health_open(tmp_path: Path) -> None:
    responses = await app_call(
        tmp_path,
        [
            ("GET", "/health", {}),
            ("GET", "/health/ready", {}),
            ("GET", "/metrics", {}),
            ("GET", "/v1/models", {}),
            ("GET", "/v1/models", {"headers": {"Authorization": "Bearer nope"}}),
            ("GET", "/v1/models", {"headers": KEY}),
            ("POST", "/v1/chat/completions", {"json": CHAT}),
            ("POST", "/v1/chat/completions", {"json": CHAT, "headers": KEY}),
        ],
        api_keys="sk-real, sk-other",
    )
    assert [r.status_code for r in responses] == [200, 200, 401, 401, 401, 200, 401, 200]
    assert responses[-1].json()["choices"][0]["message"]["content"] == "ok"
    # The request id is still echoed on a refusal.
    assert responses[3].headers["x-request-id"]


async def test_real_app_readiness_names_models_only_to_a_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[[key]]\nname = "none"\nsha256 = "{hash_key("sk-none")}"\nmodels = ["other"]\n')
    ready = [
        ("GET", "/health/ready", {}),
        ("GET", "/health/ready", {"headers": {"Authorization": "Bearer wrong"}}),
        ("GET", "/health/ready", {"headers": KEY}),
        ("GET", "/health/ready", {"headers": {"Authorization": "Bearer sk-none"}}),
        ("GET", "/health/live", {}),
    ]
    responses = await app_call(tmp_path, ready, api_keys="sk-real", api_key_policy_file=keys)
    assert [r.json() for r in responses] == [
        {"status": "ready"},
        {"status": "ready"},
        {"status": "ready", "models": ["m"]},
        {"status": "ready", "models": []},  # only the models the key may use
        {"status": "ok"},
    ]
    (open_ready,) = await app_call(tmp_path, ready[:1])
    assert open_ready.json() == {"status": "ready", "models": ["m"]}, "a gateway without keys hides nothing"


async def test_real_app_keeps_the_docs_and_unknown_paths_behind_the_key(tmp_path: Path) -> None:
    paths = ["/docs", "/redoc", "/openapi.json", "/nothing"]
    requests = [("GET", path, {}) for path in paths] + [("GET", path, {"headers": KEY}) for path in paths]
    responses = await app_call(tmp_path, requests, api_keys="sk-real")
    assert [r.status_code for r in responses] == [401] * 4 + [200, 200, 200, 404]
    assert all(r.json()["error"]["code"] == "invalid_api_key" for r in responses[:4])


async def test_real_app_opens_metrics_only_when_asked(tmp_path: Path) -> None:
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/metrics", {}),
        ("GET", "/metrics", {"headers": KEY}),
        ("GET", "/health", {}),
    ]
    assert [r.status_code for r in await app_call(tmp_path, requests, api_keys="sk-real")] == [401, 200, 200]
    opened = await app_call(tmp_path, requests, api_keys="sk-real", metrics_require_auth=False)
    assert [r.status_code for r in opened] == [200, 200, 200]


async def test_a_metrics_port_serves_metrics_without_a_key_and_the_gateway_port_none(tmp_path: Path) -> None:
    port = free_port()
    backend = ScriptedBackend(text_chunks(b"ok"))
    settings = Settings(model_repository=[make_repo(tmp_path)], api_keys="sk-real", metrics_port=port)
    app = create_app(settings, backend=backend)
    async with app.router.lifespan_context(app), client(app) as c, httpx.AsyncClient() as scraper:
        scraped = await scraper.get(f"http://127.0.0.1:{port}/metrics")
        assert scraped.status_code == 200 and "# TYPE gateway_requests_total counter" in scraped.text
        assert (await scraper.get(f"http://127.0.0.1:{port}/v1/models")).status_code == 404
        assert (await c.get("/metrics")).status_code == 401
        assert (await c.get("/metrics", headers=KEY)).status_code == 404, "not on the gateway's port at all"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics")


async def test_real_app_without_keys_is_open(tmp_path: Path) -> None:
    (response,) = await app_call(tmp_path, [("GET", "/v1/models", {})])
    assert response.status_code == 200


async def test_real_app_checks_the_key_before_the_body_size(tmp_path: Path) -> None:
    big = b"x" * (LIMIT + 1)
    responses = await app_call(
        tmp_path,
        [
            ("POST", "/v1/chat/completions", {"content": big}),
            ("POST", "/v1/chat/completions", {"content": big, "headers": KEY}),
            ("POST", "/v1/chat/completions", {"content": Chunks(big[:600], big[600:]), "headers": KEY}),
        ],
        api_keys="sk-real",
        max_body_bytes=LIMIT,
    )
    assert [r.status_code for r in responses] == [401, 413, 413]
    assert responses[1].json()["error"]["code"] == "request_too_large"


async def test_real_app_accepts_a_chunked_body_at_the_limit(tmp_path: Path) -> None:
    body = json.dumps({**CHAT, "user": ""}).encode()
    body = body[:-1] + b" " * (LIMIT - len(body)) + b"}"
    assert len(body) == LIMIT
    (response,) = await app_call(
        tmp_path,
        [
            (
                "POST",
                "/v1/chat/completions",
                {"content": Chunks(body[:100], body[100:]), "headers": {"content-type": "application/json"}},
            )
        ],
        max_body_bytes=LIMIT,
    )
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "ok"


async def test_a_key_file_without_keys_yet_still_closes_the_gateway(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text("# no keys yet\n")
    responses = await app_call(
        tmp_path, [("GET", "/v1/models", {"headers": KEY}), ("GET", "/health", {})], api_key_policy_file=keys
    )
    assert [r.status_code for r in responses] == [401, 200]


async def test_real_app_limits_a_named_key_and_shows_the_headers(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[[key]]\nname = "team"\nsha256 = "{hash_key("sk-real")}"\nrpm = 2\nmodels = ["m"]\n')
    responses = await app_call(
        tmp_path,
        [("POST", "/v1/chat/completions", {"json": CHAT, "headers": KEY}) for _ in range(3)]
        + [("POST", "/v1/chat/completions", {"json": {**CHAT, "model": "other"}, "headers": KEY})],
        api_key_policy_file=keys,
    )
    assert [r.status_code for r in responses] == [200, 200, 429, 429]
    assert [r.headers["x-ratelimit-remaining-requests"] for r in responses] == ["1", "0", "0", "0"]
