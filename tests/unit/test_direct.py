"""The generating routes called straight from the ASGI call (``http.direct``).

They answer as the FastAPI routes they stand for: the same handlers, the same body models, and
the same refusals of bodies FastAPI would refuse. A client that leaves in any phase (the queue,
the first step, a non-streaming generation, the stream) ends the backend's work, through the one
``ClientWatch`` of the request.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from prometheus_client import generate_latest

from gateway.app import create_app
from gateway.config import Settings
from gateway.errors import InvalidRequestError
from gateway.http.direct import DIRECT_ROUTES, parse_body, read_body
from gateway.http.routes import chat, completions, responses
from gateway.plan.requests import ChatCompletionRequest, CompletionRequest
from tests.fakes import ScriptedBackend, text_chunks
from tests.unit.test_app import make_repo

pytestmark = pytest.mark.anyio

JSON = "application/json"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_each_direct_route_is_the_declared_post_route_with_its_body_model(tmp_path: Path) -> None:
    routers = (chat.router, completions.router, responses.router)
    declared = {
        r.path: r for router in routers for r in router.routes if isinstance(r, APIRoute) and "POST" in r.methods
    }
    app = create_app(Settings(model_repository=[make_repo(tmp_path)]), backend=ScriptedBackend())
    paths = app.openapi()["paths"]
    for path, route in DIRECT_ROUTES.items():
        assert declared[path].endpoint is route.endpoint
        schema = paths[path]["post"]["requestBody"]["content"][JSON]["schema"]
        assert schema["$ref"].rsplit("/", 1)[1] == route.model.__name__


def refusal(raw: bytes, content_type: str | None = JSON) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        parse_body(raw, content_type, CompletionRequest)
    assert info.value.status_code == 400
    return info.value


@pytest.mark.parametrize(
    ("raw", "content_type", "message", "code"),
    [
        (b'{"model": "m", "prompt": "hi"}', "text/plain", "The request body must be JSON", "unsupported_media_type"),
        (b"{}", None, "The request body must be JSON", "unsupported_media_type"),
        (b"", JSON, "The request body is empty: it must be a JSON object.", "invalid_json"),
        (b"{", JSON, "We could not parse the JSON body of your request.", "invalid_json"),
        (b"\xff", JSON, "There was an error parsing the body", None),
        (b"[" * 5000 + b"]" * 5000, JSON, "There was an error parsing the body", None),
        (b"null", JSON, "The request body must be a JSON object.", "invalid_type"),
        (b"[]", JSON, "The request body must be a JSON object.", "invalid_type"),
    ],
)
def test_bodies_fastapi_refuses_are_refused_in_the_same_words(
    raw: bytes, content_type: str | None, message: str, code: str | None
) -> None:
    error = refusal(raw, content_type)
    assert error.message.startswith(message)
    assert error.code == code


def test_the_first_invalid_field_is_named() -> None:
    error = refusal(b'{"model": "m", "prompt": "hi", "stream_options": "x", "n": 0}')
    assert error.param == "n"
    assert error.message == "Invalid value for 'n': Input should be greater than or equal to 1 (and 1 more error)"


def test_json_is_read_as_the_stdlib_reads_it() -> None:
    """Integers beyond 64 bits stay exact (orjson would make a float of them, and this seed would
    then round into range); UTF-16 with a BOM parses, as FastAPI parsed it."""
    error = refusal(b'{"model": "m", "prompt": "hi", "seed": -9223372036854775809}')
    assert error.param == "seed"
    body = parse_body('{"model": "m", "prompt": "hi", "max_tokens": 3}'.encode("utf-16"), JSON, CompletionRequest)
    assert body.max_tokens == 3
    message = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    assert parse_body(message, JSON, ChatCompletionRequest).messages[0].content == "hi"


def receiving(*messages: dict[str, Any]) -> Any:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return receive


async def test_the_body_is_read_whole_from_its_pieces_and_a_client_leaving_while_sending_is_a_400() -> None:
    pieces = [b'{"model": ', b"", b'"m"}']
    whole = receiving(*({"type": "http.request", "body": p, "more_body": i < 2} for i, p in enumerate(pieces)))
    assert await read_body(whole) == b'{"model": "m"}'
    assert await read_body(receiving({"type": "http.request"})) == b""
    left = receiving({"type": "http.request", "body": b'{"mo', "more_body": True}, {"type": "http.disconnect"})
    with pytest.raises(InvalidRequestError) as info:
        await read_body(left)
    assert (info.value.status_code, info.value.message) == (400, "There was an error parsing the body")


# -- the client leaving ---------------------------------------------------------------------------


async def call(
    app: Any, path: str, body: dict[str, Any], leave_after: float | None, callers: list[str] | None = None
) -> tuple[int, list[dict[str, Any]]]:
    """One ASGI call: the body, then a disconnect after ``leave_after`` seconds (None: never);
    returns the status sent and every message (``callers`` gets, for each, what called ``send``)."""
    raw = json.dumps(body).encode()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}
        if leave_after is None:
            await asyncio.Event().wait()
        await asyncio.sleep(leave_after or 0.0)
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if callers is not None:
            task = asyncio.current_task()
            assert task is not None
            callers.append(f"{sys._getframe(1).f_code.co_qualname} in {task.get_coro().__qualname__}")

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


def chat_body(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, **extra}


def metrics_text(app: Any) -> str:
    return generate_latest(app.state.components.metrics.registry).decode()


@pytest.mark.parametrize("stream", [True, False])
async def test_leaving_before_the_first_token_ends_the_backend_work(tmp_path: Path, stream: bool) -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b"), delay=1.0)
    settings = Settings(model_repository=[make_repo(tmp_path)], first_response_wait=5.0)
    app = create_app(settings, backend=backend)
    async with app.router.lifespan_context(app):
        status, _ = await asyncio.wait_for(call(app, "/v1/chat/completions", chat_body(stream=stream), 0.1), 2.0)
        await asyncio.sleep(0)  # the call's task (this one) was not left cancelled
        assert status == 499
        assert backend.closed_early == 1
        assert app.state.components.service.admission.in_flight == 0
        assert 'gateway_cancellations_total{reason="client_disconnect"} 1.0' in metrics_text(app)


async def test_leaving_mid_stream_ends_the_stream_quietly(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b", b"c", b"d"), delay=0.1)
    app = create_app(Settings(model_repository=[make_repo(tmp_path)]), backend=backend)
    async with app.router.lifespan_context(app):
        status, sent = await asyncio.wait_for(
            call(app, "/v1/completions", {**chat_body(stream=True), "prompt": "x"}, 0.25), 2.0
        )
        await asyncio.sleep(0)
        assert status == 200
        assert b"[DONE]" not in b"".join(m.get("body", b"") for m in sent)
        assert backend.closed_early == 1
        assert app.state.components.service.admission.in_flight == 0


async def test_leaving_the_queue_frees_its_place_and_the_running_request_ends_well(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b"), delay=0.2)
    settings = Settings(model_repository=[make_repo(tmp_path)], max_concurrent_requests=1, queue_timeout=5.0)
    app = create_app(settings, backend=backend)
    async with app.router.lifespan_context(app):
        running = asyncio.create_task(call(app, "/v1/chat/completions", chat_body(), None))
        await asyncio.sleep(0.05)
        status, _ = await asyncio.wait_for(call(app, "/v1/chat/completions", chat_body(), 0.1), 2.0)
        assert status == 499
        assert app.state.components.service.admission.gate("m").waiting == 0
        assert (await asyncio.wait_for(running, 2.0))[0] == 200
        assert len(backend.requests) == 1  # the one that left never reached the backend


async def test_stream_bodies_go_to_the_servers_send_itself(tmp_path: Path) -> None:
    """Once the headers are out, the frames skip every wrapper of ``send`` (Starlette's 500
    handler's included): the server's ``send`` is called by the SSE response itself, from the
    body's own task (whose coroutine chain is not the middlewares'). The headers still pass every
    middleware (the request id is added on the way), from the request's task."""
    backend = ScriptedBackend(text_chunks(b"he", b"llo", reason="length"))
    app = create_app(Settings(model_repository=[make_repo(tmp_path)]), backend=backend)
    callers: list[str] = []
    async with app.router.lifespan_context(app):
        status, sent = await asyncio.wait_for(
            call(app, "/v1/chat/completions", chat_body(stream=True, max_tokens=2), None, callers), 5.0
        )
    assert status == 200 and any(name == b"x-request-id" for name, _ in sent[0]["headers"])
    bodies = [(caller, m) for caller, m in zip(callers, sent, strict=True) if m["type"] == "http.response.body"]
    assert b"".join(m["body"] for _, m in bodies).endswith(b"data: [DONE]\n\n")
    writer = "SSEResponse.__call__.<locals>.write_body"
    assert {caller for caller, _ in bodies} == {f"{writer} in {writer}"}
    assert sent[0]["type"] == "http.response.start" and not callers[0].endswith(f" in {writer}")
