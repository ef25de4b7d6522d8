"""The band reaches Triton's queue: over real HTTP, through the gateway, against a real Triton of
its own.

``priority_order`` (``tests/triton_models_priority``, served by a private Triton beside the
reference repository) runs one request at a time on its one instance and
answers with its place in the order it ran; its dynamic batcher declares three priority levels
(default 2). The gateway has slots to spare, so every request goes to Triton at once, and it is
Triton's queue that orders them: one long request holds the instance, the others are sent one at
a time, each counted in Triton's pending-request gauge before the next is sent (so their arrival
order is known), then the long one is let go. A critical request sent last runs before the
standard ones queued ahead of it, which run in arrival order before the sheddable one queued
first. A model that declares no levels gets no priority and answers as usual.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator

import httpx
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import (
    ROOT,
    GatewayProcess,
    start_gateway,
    stop_gateway,
    stop_in_background,
)

pytestmark = pytest.mark.anyio

MODEL = "priority_order"
PRIORITY = "x-gateway-priority"
_ORDER = re.compile(r"order=(\d+)")


PRIORITY_REPOSITORY = ROOT / "tests" / "triton_models_priority"


@pytest.fixture(scope="module")
def priority_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A Triton serving ``priority_order`` alone (this module's own)."""
    log = tmp_path_factory.mktemp("priority-triton") / "tritonserver.log"
    server = TritonServer(PRIORITY_REPOSITORY, log_file=log)
    server.start()
    yield server
    stop_in_background(server)


@pytest.fixture(scope="module")
def roomy(priority_triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """An open gateway with slots to spare and no shedding: nothing waits in the gateway, so
    every request is in Triton's queue as soon as it is sent."""
    env = {"GATEWAY_MAX_CONCURRENT_REQUESTS": "32", "GATEWAY_SHED_PRIORITY": "1000000"}
    process = start_gateway(priority_triton.grpc_url, tmp_path_factory.mktemp("priority") / "gateway.log", env=env)
    yield process
    stop_gateway(process)


def model_sample(page: str, name: str) -> float:
    """The value of ``name`` for ``priority_order`` on Triton's metrics page (0 before it is set)."""
    pattern = re.compile(rf'^{name}\{{[^}}]*model="{MODEL}"[^}}]*\}}\s+(\S+)$', re.MULTILINE)
    match = pattern.search(page)
    return float(match.group(1)) if match else 0.0


async def wait_for_sample(metrics: httpx.AsyncClient, url: str, name: str, value: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    while (seen := model_sample((await metrics.get(url)).text, name)) != value:
        assert loop.time() < deadline, f"{name} stayed at {seen}, not {value}"
        await asyncio.sleep(0.02)


async def completion(client: httpx.AsyncClient, prompt: str, band: str | None) -> tuple[int, str]:
    """(the place the model ran it in, the band header of the answer)."""
    headers = {PRIORITY: band} if band is not None else {}
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 4}
    answer = await client.post("/v1/completions", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    match = _ORDER.search(answer.json()["choices"][0]["text"])
    assert match, answer.text
    return int(match.group(1)), answer.headers[PRIORITY]


async def test_triton_runs_a_critical_request_before_the_standard_ones_queued_ahead_of_it(
    roomy: GatewayProcess, priority_triton: TritonServer
) -> None:
    triton = priority_triton
    started, pending = "priority_order_started_total", "nv_inference_pending_request_count"
    async with httpx.AsyncClient(base_url=roomy.url) as client, httpx.AsyncClient(timeout=10) as metrics:
        before = model_sample((await metrics.get(triton.metrics_url)).text, started)
        await wait_for_sample(metrics, triton.metrics_url, pending, 0)

        async def hold() -> None:  # holds the instance until cancelled: its stream is closed
            body = {"model": MODEL, "prompt": "hold=30", "max_tokens": 4, "stream": True}
            async with client.stream("POST", "/v1/completions", json=body, timeout=60) as answer:
                async for _ in answer.aiter_bytes():
                    pass

        holder = asyncio.create_task(hold())
        await wait_for_sample(metrics, triton.metrics_url, started, before + 1)  # it runs
        queued: dict[str, asyncio.Task[tuple[int, str]]] = {}
        for label, band in [
            ("sheddable", "sheddable"),
            ("first", None),
            ("second", "standard"),
            ("urgent", "critical"),
        ]:
            queued[label] = asyncio.create_task(completion(client, label, band))
            await wait_for_sample(metrics, triton.metrics_url, pending, len(queued))
        holder.cancel()  # the gateway cancels its Triton request: the instance is free
        await asyncio.gather(holder, return_exceptions=True)
        results = {label: await task for label, task in queued.items()}

    order = sorted(results, key=lambda label: results[label][0])
    assert order == ["urgent", "first", "second", "sheddable"], results
    assert results["urgent"][0] == before + 2, "the critical request ran as soon as the instance was free"
    assert {label: header for label, (_, header) in results.items()} == {
        "sheddable": "1",
        "first": "0",
        "second": "0",
        "urgent": "-1",
    }


async def test_a_model_without_priority_levels_answers_a_critical_request_as_usual(gateway: GatewayProcess) -> None:
    """``scripted`` (the session's Triton) declares no levels: the gateway sends it no priority,
    and it answers."""
    body = {"model": "scripted", "prompt": json.dumps({"echo_inputs": True}), "max_tokens": 4}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        answer = await client.post("/v1/completions", json=body, headers={PRIORITY: "critical"})
    assert answer.status_code == 200, answer.text
    assert answer.headers[PRIORITY] == "-1"
    echoed = json.loads(answer.json()["choices"][0]["text"])
    assert echoed["parameters"] == {}, "no request parameter reached the model"
