"""Background responses at the HTTP edge, against an in-memory backend: queued at once, polled to
the end, streamed again from any sequence number, cancelled, refused when they cannot be stored,
waiting for a slot instead of failing, and stored ``failed`` when the gateway stops."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.config import Settings
from gateway.http.background_answer import STOPPED
from tests.fakes import ScriptedBackend, text_chunks
from tests.unit.test_responses_edge import assemble, body, events_of, make_repo

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def gateway(tmp_path: Path, backend: ScriptedBackend, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    store = f"sqlite:///{tmp_path / 'responses.db'}"
    config = Settings(
        model_repository=[make_repo(tmp_path)], first_response_wait=1.0, responses_store=store, **settings
    )
    app = create_app(config, backend=backend)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            yield client


async def until(client: httpx.AsyncClient, response_id: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll the stored object until ``done`` says so (5 s at most)."""
    deadline = time.monotonic() + 5
    while True:
        stored = (await client.get(f"/v1/responses/{response_id}")).json()
        if done(stored) or time.monotonic() > deadline:
            return stored
        await asyncio.sleep(0.01)


def ended(stored: dict[str, Any]) -> bool:
    return stored["status"] not in ("queued", "in_progress")


def slow(pieces: int = 200) -> ScriptedBackend:
    return ScriptedBackend(text_chunks(*[b"tok "] * pieces), delay=0.02)


async def test_a_background_response_is_queued_at_once_then_completes_as_the_foreground_one(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"he", b"llo"))
    async with gateway(tmp_path, backend) as client:
        foreground = (await client.post("/v1/responses", json=body())).json()
        answer = await client.post("/v1/responses", json=body(background=True))
        assert answer.status_code == 200 and answer.headers["x-gateway-priority"] == "1"  # the jobs' band
        queued = answer.json()
        assert queued["status"] == "queued" and queued["background"] is True and queued["output"] == []
        final = await until(client, queued["id"], ended)
    assert final["status"] == "completed" and final["background"] is True
    assert [item["content"] for item in final["output"]] == [item["content"] for item in foreground["output"]]
    assert final["usage"] == foreground["usage"]


async def test_its_events_stream_again_from_the_start_or_after_any_sequence_number(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b", b"c"))
    async with gateway(tmp_path, backend) as client:
        streamed = await client.post("/v1/responses", json=body(background=True, stream=True))
        events = events_of(streamed.text)
        response_id = events[0]["response"]["id"]
        again = events_of((await client.get(f"/v1/responses/{response_id}", params={"stream": "true"})).text)
        after = events_of((await client.get(f"/v1/responses/{response_id}?stream=true&starting_after=4")).text)
        past = await client.get(f"/v1/responses/{response_id}?stream=true&starting_after=999")
    kinds = [event["type"] for event in events]
    assert kinds[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert kinds[-1] == "response.completed" and events[0]["response"]["status"] == "queued"
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert again == events
    assert after == events[5:]
    assert past.status_code == 200 and events_of(past.text) == []
    assert assemble(events).output_text == "abc"  # the SDK's own assembly takes the queued events


async def test_bad_stream_queries_are_400s_naming_the_parameter(tmp_path: Path) -> None:
    async with gateway(tmp_path, ScriptedBackend(text_chunks(b"x"))) as client:
        background = (await client.post("/v1/responses", json=body(background=True))).json()
        foreground = (await client.post("/v1/responses", json=body())).json()
        answers = {
            "starting_after": await client.get(f"/v1/responses/{background['id']}?stream=true&starting_after=-1"),
            "starting_after ": await client.get(f"/v1/responses/{background['id']}?stream=true&starting_after=x"),
            "stream": await client.get(f"/v1/responses/{background['id']}?stream=yes"),
            "stream ": await client.get(f"/v1/responses/{foreground['id']}?stream=true"),
        }
    for param, answer in answers.items():
        assert answer.status_code == 400, (param, answer.text)
        assert answer.json()["error"]["param"] == param.strip()


@pytest.mark.parametrize("settings", [{"responses_store_enabled": False}, {}])
async def test_background_without_a_store_is_a_400(tmp_path: Path, settings: dict[str, Any]) -> None:
    extra = {} if settings else {"store": False}
    async with gateway(tmp_path, ScriptedBackend(text_chunks(b"x")), **settings) as client:
        answer = await client.post("/v1/responses", json=body(background=True, **extra))
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "background"


async def test_cancel_stops_the_generation_and_stores_cancelled(tmp_path: Path) -> None:
    backend = slow()
    async with gateway(tmp_path, backend) as client:
        queued = (await client.post("/v1/responses", json=body(background=True))).json()
        running = await until(client, queued["id"], lambda stored: stored["status"] == "in_progress")
        assert running["status"] == "in_progress"
        answer = await client.post(f"/v1/responses/{queued['id']}/cancel")
        stored = (await client.get(f"/v1/responses/{queued['id']}")).json()
        again = await client.post(f"/v1/responses/{queued['id']}/cancel")
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
    assert stored["status"] == "cancelled" and again.json() == answer.json()
    assert backend.closed_early == 1 and backend.finished == 0


async def test_cancel_of_a_finished_response_answers_it_unchanged_and_of_a_foreground_one_is_a_400(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path, ScriptedBackend(text_chunks(b"x"))) as client:
        background = (await client.post("/v1/responses", json=body(background=True))).json()
        final = await until(client, background["id"], ended)
        unchanged = await client.post(f"/v1/responses/{background['id']}/cancel")
        foreground = (await client.post("/v1/responses", json=body())).json()
        refused = await client.post(f"/v1/responses/{foreground['id']}/cancel")
        unknown = await client.post("/v1/responses/resp_nope/cancel")
    assert unchanged.json() == final
    assert (
        refused.status_code == 400
        and refused.json()["error"]["message"] == "Only background responses can be cancelled."
    )
    assert unknown.status_code == 404


async def test_a_sheddable_background_response_waits_for_a_free_slot_instead_of_failing(tmp_path: Path) -> None:
    backend = ScriptedBackend(text_chunks(*[b"tok "] * 20), delay=0.02)
    async with gateway(tmp_path, backend, max_concurrent_requests=1, scheduling_headroom=0.0) as client:
        foreground = asyncio.ensure_future(client.post("/v1/responses", json=body()))
        while not backend.requests:  # the foreground one holds the slot
            await asyncio.sleep(0.005)
        queued = (await client.post("/v1/responses", json=body(background=True))).json()
        await asyncio.sleep(0.15)  # a few backoffs later: still waiting, not failed
        waiting = (await client.get(f"/v1/responses/{queued['id']}")).json()
        assert (await foreground).json()["status"] == "completed"
        final = await until(client, queued["id"], ended)
    assert waiting["status"] == "queued"
    assert final["status"] == "completed"


async def test_stopping_the_gateway_stores_a_running_response_failed(tmp_path: Path) -> None:
    backend = slow()
    async with gateway(tmp_path, backend) as client:
        queued = (await client.post("/v1/responses", json=body(background=True))).json()
        await until(client, queued["id"], lambda stored: stored["status"] == "in_progress")
    async with gateway(tmp_path, ScriptedBackend()) as client:
        stored = (await client.get(f"/v1/responses/{queued['id']}")).json()
    assert stored["status"] == "failed" and stored["error"]["message"] == STOPPED
    assert backend.closed_early == 1


async def test_a_deleted_background_response_stops_and_stays_deleted(tmp_path: Path) -> None:
    backend = slow()
    async with gateway(tmp_path, backend) as client:
        queued = (await client.post("/v1/responses", json=body(background=True))).json()
        await until(client, queued["id"], lambda stored: stored["status"] == "in_progress")
        assert (await client.delete(f"/v1/responses/{queued['id']}")).status_code == 200
        deadline = time.monotonic() + 5
        while not backend.closed_early and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        gone = await client.get(f"/v1/responses/{queued['id']}")
    assert backend.closed_early == 1 and gone.status_code == 404
