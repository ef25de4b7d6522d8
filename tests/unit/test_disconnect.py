"""A client that leaves in any phase (the queue, the first step, a non-streaming generation, the
stream) ends the backend's work, through the request's one ``http.disconnect.ClientWatch``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from gateway.app import create_app
from gateway.config import Settings
from tests.fakes import ScriptedBackend, text_chunks
from tests.unit.test_app import asgi_call, body_message, make_repo
from tests.unit.test_responses_edge import make_repo as responses_repo

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
        request = [body_message(chat_body(stream=stream))]
        status, _ = await asyncio.wait_for(asgi_call(app, "/v1/chat/completions", request, 0.1), 2.0)
        await asyncio.sleep(0)  # the call's task (this one) was not left cancelled
        assert status == 499
        assert backend.closed_early == 1
        assert app.state.components.service.admission.in_flight == 0
        assert 'gateway_cancellations_total{reason="client_disconnect"} 1.0' in metrics_text(app)


async def test_leaving_mid_stream_ends_the_stream_quietly(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b", b"c", b"d"), delay=0.1)
    app = create_app(Settings(model_repository=[make_repo(tmp_path)]), backend=backend)
    async with app.router.lifespan_context(app):
        request = [body_message({**chat_body(stream=True), "prompt": "x"})]
        status, sent = await asyncio.wait_for(asgi_call(app, "/v1/completions", request, 0.25), 2.0)
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
        running = asyncio.create_task(asgi_call(app, "/v1/chat/completions", [body_message(chat_body())]))
        await asyncio.sleep(0.05)
        leaving = asgi_call(app, "/v1/chat/completions", [body_message(chat_body())], 0.1)
        status, _ = await asyncio.wait_for(leaving, 2.0)
        assert status == 499
        assert app.state.components.service.admission.gate("m").waiting == 0
        assert (await asyncio.wait_for(running, 2.0))[0] == 200
        assert len(backend.requests) == 1  # the one that left never reached the backend


@pytest.mark.parametrize(
    ("delay", "wait", "text"),
    [(0.1, 5.0, "ab"), (0.5, 0.05, None)],
    ids=["after-two-tokens", "while-the-first-step-is-pending"],
)
async def test_a_responses_stream_whose_client_left_is_stored_as_far_as_it_got(
    tmp_path: Path, delay: float, wait: float, text: str | None
) -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b", b"c", b"d"), delay=delay)
    app = create_app(Settings(model_repository=[responses_repo(tmp_path)], first_response_wait=wait), backend=backend)
    request = [body_message({"model": "m", "input": "hi", "stream": True})]
    async with app.router.lifespan_context(app):
        status, sent = await asyncio.wait_for(asgi_call(app, "/v1/responses", request, 0.25), 2.0)
        created = json.loads(sent[1]["body"].split(b"\n")[1][len(b"data: ") :])
        stored = await app.state.components.store.get(created["response"]["id"], "")
    assert status == 200 and backend.closed_early == 1
    response = stored.response
    assert response["status"] == "incomplete" and response["incomplete_details"] == {"reason": "client_disconnected"}
    assert [part["text"] for item in response["output"] for part in item["content"]] == ([text] if text else [])
