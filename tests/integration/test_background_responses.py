"""Background responses (``background: true``) end to end: the openai SDK and raw HTTP → gateway →
real Triton. Polled to the end, streamed, resumed after any event, cancelled (the Triton call
stops), outliving their client, charged to their key, waiting for a busy slot, seen and cancelled
from another gateway on the same store, and stored ``failed`` when their gateway stops."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.keys.hash import hash_key
from gateway.triton_launcher import TritonServer
from tests.integration.conftest import MODEL, GatewayProcess, read_metric, start_gateway, stop_gateway, wait_for
from tests.integration.test_responses import SCRIPTED, events_of, script, slow_script

RUNNING = ("queued", "in_progress")
KEY = "sk-background"
TPM = 1_000_000


def scripted_counts(triton: TritonServer) -> tuple[float, float]:
    """The scripted model's (cancelled so far, in flight now)."""
    return (
        read_metric(triton.metrics_url, "scripted_requests_cancelled_total"),
        read_metric(triton.metrics_url, "scripted_requests_in_flight"),
    )


def status_of(url: str, response_id: str, headers: dict[str, str] | None = None) -> str:
    return str(httpx.get(f"{url}/v1/responses/{response_id}", headers=headers, timeout=10).json()["status"])


def deltas(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


# -- on the session's gateway --------------------------------------------------------------------


def test_a_polled_background_response_ends_as_the_same_greedy_request_in_the_foreground(
    client: openai.OpenAI, gateway: GatewayProcess
) -> None:
    args: dict[str, Any] = {"model": MODEL, "input": "Tell me a story.", "max_output_tokens": 24, "temperature": 0}
    completed_before = read_metric(gateway.url + "/metrics", "gateway_background_responses_total", 0.0)
    foreground = client.responses.create(**args)
    queued = client.responses.create(**args, background=True)
    assert queued.status == "queued" and queued.background is True and queued.output == []
    assert client.responses.retrieve(queued.id).id == queued.id  # stored at once
    seen = [queued.status]

    def ended() -> bool:
        seen.append(client.responses.retrieve(queued.id).status or "")
        return seen[-1] not in RUNNING

    assert wait_for(ended, timeout=20)
    final = client.responses.retrieve(queued.id)
    assert final.status == foreground.status and final.background is True
    assert final.output_text == foreground.output_text and final.output_text
    assert final.usage is not None and foreground.usage is not None
    assert final.usage.output_tokens == foreground.usage.output_tokens
    assert all(status in (*RUNNING, final.status) for status in seen)
    counted = read_metric(gateway.url + "/metrics", "gateway_background_responses_total")
    assert counted >= completed_before + 3  # queued, in_progress, its end


def test_a_background_stream_outlives_its_client_and_resumes_after_any_event(
    client: openai.OpenAI, triton: TritonServer
) -> None:
    cancelled_before, _ = scripted_counts(triton)
    pieces = [f"t{i} " for i in range(30)]
    with client.responses.create(
        model=SCRIPTED, input=script(*pieces, delay=0.04), background=True, stream=True
    ) as stream:
        head = []
        for event in stream:
            head.append(event)
            if sum(e.type == "response.output_text.delta" for e in head) == 3:
                break  # the client leaves mid-stream
    assert [e.type for e in head[:3]] == ["response.created", "response.queued", "response.in_progress"]
    assert head[0].response.status == "queued"  # type: ignore[union-attr]
    response_id = head[0].response.id  # type: ignore[union-attr]
    after = head[-1].sequence_number
    with client.responses.retrieve(response_id, stream=True, starting_after=after) as rest:
        tail = list(rest)
    numbers = [e.sequence_number for e in head + tail]
    assert numbers == list(range(len(numbers)))  # no gap, no repeat
    assert tail[0].sequence_number == after + 1 and tail[-1].type == "response.completed"
    assert deltas(head + tail) == "".join(pieces) == tail[-1].response.output_text  # type: ignore[union-attr]
    assert scripted_counts(triton)[0] == cancelled_before  # the client leaving cancelled nothing
    assert client.responses.retrieve(response_id).status == "completed"
    # The SDK's own helper replays from the start and filters on its side.
    with client.responses.stream(response_id=response_id, starting_after=after) as again:
        assert again.get_final_response().output_text == "".join(pieces)


def test_a_background_stream_is_framed_as_the_normal_stream_also_when_resumed_raw(gateway: GatewayProcess) -> None:
    body = {"model": SCRIPTED, "input": script("a", "b", "c"), "background": True, "stream": True}
    with httpx.stream("POST", gateway.url + "/v1/responses", json=body, timeout=30) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-gateway-priority"] == "1"  # the jobs' band
        events = events_of(response.read().decode())
    response_id = events[0]["response"]["id"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    resumed = httpx.get(f"{gateway.url}/v1/responses/{response_id}?stream=true&starting_after=4", timeout=30)
    assert resumed.headers["content-type"].startswith("text/event-stream")
    assert events_of(resumed.text) == events[5:]
    whole = httpx.get(f"{gateway.url}/v1/responses/{response_id}", params={"stream": "true"}, timeout=30)
    assert events_of(whole.text) == events
    for bad in ("-1", "x", "1.5"):
        refused = httpx.get(f"{gateway.url}/v1/responses/{response_id}?stream=true&starting_after={bad}")
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "starting_after"


def test_cancel_while_in_progress_stops_the_triton_call(
    client: openai.OpenAI, gateway: GatewayProcess, triton: TritonServer
) -> None:
    cancelled_before, _ = scripted_counts(triton)
    queued = client.responses.create(model=SCRIPTED, input=slow_script(400, 0.05), background=True)
    assert wait_for(
        lambda: client.responses.retrieve(queued.id).status == "in_progress" and scripted_counts(triton)[1] >= 1,
        timeout=10,
    )
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled" and cancelled.id == queued.id
    assert wait_for(lambda: scripted_counts(triton) == (cancelled_before + 1, 0), timeout=5), scripted_counts(triton)
    assert wait_for(lambda: read_metric(gateway.url + "/metrics", "gateway_requests_running") == 0, timeout=5)
    assert client.responses.retrieve(queued.id).status == "cancelled"
    again = client.responses.cancel(queued.id)  # idempotent: the cancelled object, unchanged
    assert again.model_dump() == cancelled.model_dump()


def test_background_refusals_are_the_posts_own_400s(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=SCRIPTED, input="hi", background=True, store=False)
    assert info.value.body["param"] == "background"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as info:  # planning's checks stay synchronous
        client.responses.create(model=SCRIPTED, input=[], background=True)
    assert info.value.body["param"] == "input"  # type: ignore[index]
    foreground = client.responses.create(model=SCRIPTED, input=script("x"))
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.cancel(foreground.id)
    assert info.value.message.endswith("Only background responses can be cancelled.")
    with pytest.raises(openai.BadRequestError):
        client.responses.retrieve(foreground.id, stream=True)  # only a background response streams again
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_unknown")


# -- two gateways on one store, with API keys ----------------------------------------------------


@dataclass
class Shared:
    """Two gateways on one SQLite store and one key file: ``alpha`` with a single slot per model."""

    alpha: GatewayProcess
    beta: GatewayProcess
    common: list[str]
    """The flags that put a gateway on that store, with those keys."""


@pytest.fixture(scope="module")
def shared(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    base = tmp_path_factory.mktemp("background")
    keys = base / "keys.toml"
    keys.write_text(f'[[key]]\nname = "bg-team"\nsha256 = ["{hash_key(KEY)}"]\ntpm = {TPM}\n')
    common = ["--api-key-policy-file", str(keys), "--responses-store", f"sqlite:///{base / 'responses.db'}"]
    alpha = start_gateway(
        triton.grpc_url, base / "alpha.log", *common, "--max-concurrent-requests", "1", "--scheduling-headroom", "0"
    )
    beta = start_gateway(triton.grpc_url, base / "beta.log", *common)
    yield Shared(alpha, beta, common)
    stop_gateway(alpha)
    stop_gateway(beta)


AUTH = {"Authorization": f"Bearer {KEY}"}


def post(gateway: GatewayProcess, body: dict[str, Any], path: str = "/v1/responses") -> httpx.Response:
    return httpx.post(gateway.url + path, json=body, headers=AUTH, timeout=30)


def test_a_background_responses_tokens_are_charged_to_its_key(shared: Shared) -> None:
    alpha = shared.alpha
    if 60 - time.time() % 60 < 5:  # the counts are per minute: not across a minute's turn
        time.sleep(60 - time.time() % 60 + 0.05)
    count = {"model": SCRIPTED, "input": "x"}
    before = int(post(alpha, count, "/v1/responses/input_tokens").headers["x-ratelimit-remaining-tokens"])
    queued = post(alpha, {"model": SCRIPTED, "input": script("a", "b", "c"), "background": True}).json()
    assert wait_for(lambda: status_of(alpha.url, queued["id"], AUTH) == "completed", timeout=10)
    usage = httpx.get(f"{alpha.url}/v1/responses/{queued['id']}", headers=AUTH).json()["usage"]
    after = int(post(alpha, count, "/v1/responses/input_tokens").headers["x-ratelimit-remaining-tokens"])
    assert before - after == usage["total_tokens"] > 0


def test_a_background_response_waits_while_every_slot_is_busy(shared: Shared) -> None:
    alpha = shared.alpha
    body = {"model": SCRIPTED, "input": slow_script(30, 0.05), "stream": True}
    with httpx.stream("POST", alpha.url + "/v1/responses", json=body, headers=AUTH, timeout=30) as foreground:
        lines = foreground.iter_lines()
        next(line for line in lines if "response.output_text.delta" in line)  # it holds alpha's one slot
        queued = post(alpha, {"model": SCRIPTED, "input": script("done"), "background": True})
        assert queued.status_code == 200 and queued.json()["status"] == "queued"
        time.sleep(0.5)  # several backoffs while the slot stays busy: waiting, never refused
        assert status_of(alpha.url, queued.json()["id"], AUTH) == "queued"
        for _ in lines:
            pass
    assert wait_for(lambda: status_of(alpha.url, queued.json()["id"], AUTH) == "completed", timeout=10)


def test_another_gateway_on_the_store_sees_it_and_cancels_it_by_a_mark(shared: Shared, triton: TritonServer) -> None:
    alpha, beta = shared.alpha, shared.beta
    cancelled_before, _ = scripted_counts(triton)
    queued = post(alpha, {"model": SCRIPTED, "input": slow_script(400, 0.05), "background": True}).json()
    assert wait_for(lambda: status_of(beta.url, queued["id"], AUTH) == "in_progress", timeout=10)
    elsewhere = httpx.get(f"{beta.url}/v1/responses/{queued['id']}?stream=true", headers=AUTH)
    assert elsewhere.status_code == 404 and elsewhere.json()["error"]["code"] == "response_events_not_held"
    marked = post(beta, {}, f"/v1/responses/{queued['id']}/cancel")
    assert marked.status_code == 200 and marked.json()["status"] == "cancelled"
    # alpha looks at the store every 2 s: it stops the Triton call and stores its own cancelled end.
    assert wait_for(lambda: scripted_counts(triton)[0] == cancelled_before + 1, timeout=8), scripted_counts(triton)
    assert status_of(alpha.url, queued["id"], AUTH) == "cancelled"


def test_a_gateway_that_stops_stores_its_running_background_responses_failed(
    shared: Shared, triton: TritonServer, tmp_path: Path
) -> None:
    gamma = start_gateway(triton.grpc_url, tmp_path / "gamma.log", *shared.common, "--shutdown-grace-period", "0.2")
    try:
        queued = post(gamma, {"model": SCRIPTED, "input": slow_script(400, 0.05), "background": True}).json()
        assert wait_for(lambda: status_of(gamma.url, queued["id"], AUTH) == "in_progress", timeout=10)
    finally:
        stop_gateway(gamma)
    assert gamma.process.returncode == 0, gamma.log_text()
    stored = httpx.get(f"{shared.alpha.url}/v1/responses/{queued['id']}", headers=AUTH).json()
    assert stored["status"] == "failed" and stored["error"]["code"] == "shutting_down", stored


def test_a_killed_gateways_background_response_is_stored_failed_once_its_lease_is_past(
    shared: Shared, triton: TritonServer, tmp_path: Path
) -> None:
    lease = ("--batch-lease-seconds", "1.5")
    delta = start_gateway(triton.grpc_url, tmp_path / "delta.log", *shared.common, *lease)
    try:
        queued = post(delta, {"model": SCRIPTED, "input": slow_script(400, 0.05), "background": True}).json()
        assert wait_for(lambda: status_of(delta.url, queued["id"], AUTH) == "in_progress", timeout=10)
        time.sleep(2.5)  # past one lease: delta renews it, so elsewhere it is still running
        assert status_of(shared.beta.url, queued["id"], AUTH) == "in_progress"
    finally:
        delta.process.kill()  # SIGKILL: nothing stores its end
        delta.process.wait(timeout=10)
    # beta reads it once delta's lease is past: failed, stored so, for every reader after
    assert wait_for(lambda: status_of(shared.beta.url, queued["id"], AUTH) == "failed", timeout=10)
    stored = httpx.get(f"{shared.alpha.url}/v1/responses/{queued['id']}", headers=AUTH).json()
    assert stored["status"] == "failed" and stored["error"]["code"] == "server_error", stored
    assert "stopped before it finished" in stored["error"]["message"]
