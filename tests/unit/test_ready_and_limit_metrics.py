"""The series a dashboard and the alerts read beside the counts: each model's slot limit and queue
capacity (so "the queue is 90 % full" is one division of two series), and ``gateway_ready``, the
readiness check's verdict (``http.readiness``), with one worker and with several."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_args

import pytest
from prometheus_client import generate_latest

from gateway.core.admission import Admission
from gateway.errors import BackendUnavailableError, ShuttingDownError
from gateway.http.readiness import check_ready, watch_ready
from gateway.keys.counts import Step
from gateway.metrics import KEY_LIMIT_STEPS, MIGRATION_OUTCOMES, Metrics
from tests.unit.metrics_exposition import key, run_worker, scrape


def test_each_model_s_slots_and_queue_capacity_are_published() -> None:
    limits = {"llm": (8, 32), "embed": (0, 0)}
    admission = Admission(lambda model: limits[model], 1.0)
    for model in limits:
        admission.gate(model)
    found = scrape(generate_latest(Metrics(admission).registry).decode())
    assert found[key("gateway_requests_running_limit", model="llm")] == 8
    assert found[key("gateway_requests_waiting_limit", model="llm")] == 32
    assert found[key("gateway_requests_running_limit", model="embed")] == 0  # 0: no limit
    assert found[key("gateway_requests_waiting_limit", model="embed")] == 0


WORKER = """
import json, sys
from types import SimpleNamespace
from prometheus_client import generate_latest
from gateway.metrics import Metrics

limit, queue_size, ready = json.loads(sys.argv[1])
gate = SimpleNamespace(limit=limit, queue_size=queue_size, running=1, waiting=2, running_adapters={}, waiting_adapters={})
m = Metrics(SimpleNamespace(gates={"llm": gate}), shared=True)
m.shared_live.publish()
if ready is not None:
    m.ready(ready)
sys.stdout.write(generate_latest(m.registry).decode())
"""


def worker(directory: Path, limit: int, queue_size: int, ready: bool | None) -> str:
    return run_worker(directory, WORKER, [limit, queue_size, ready])


def test_several_workers_add_their_shares_up_to_the_configured_limits(tmp_path: Path) -> None:
    """``core.admission.worker_share`` splits a limit of 9 slots and 33 places as 5+4 and 17+16."""
    worker(tmp_path, 5, 17, True)
    found = scrape(worker(tmp_path, 4, 16, False))
    assert found[key("gateway_requests_running_limit", model="llm")] == 9
    assert found[key("gateway_requests_waiting_limit", model="llm")] == 33
    assert found[key("gateway_requests_waiting", model="llm")] == 4
    # the latest verdict of any live worker, not a sum or the first worker's
    assert found[key("gateway_ready")] == 0


class _Catalog:
    def __init__(self, models: dict[str, Any], error: Exception | None = None) -> None:
        self._models, self._error = models, error

    async def refresh(self) -> None:
        if self._error is not None:
            raise self._error

    async def models(self) -> dict[str, Any]:
        return self._models


def _components(*, draining: bool = False, triton_ready: bool = True, models: dict[str, Any] | None = None) -> Any:
    async def server_ready() -> bool:
        return triton_ready

    return SimpleNamespace(
        service=SimpleNamespace(draining=draining),
        backend=SimpleNamespace(server_ready=server_ready),
        catalog=_Catalog({"llm": object()} if models is None else models),
        metrics=Metrics(Admission(lambda model: (1, 1), 1.0)),
    )


def _ready_value(components: Any) -> float:
    return scrape(generate_latest(components.metrics.registry).decode())[key("gateway_ready")]


@pytest.mark.parametrize(
    ("state", "error"),
    [
        ({"draining": True}, ShuttingDownError),
        ({"triton_ready": False}, BackendUnavailableError),
        ({"models": {}}, BackendUnavailableError),
    ],
)
def test_each_refusal_of_the_readiness_check_sets_the_gauge_to_0(state: dict[str, Any], error: type) -> None:
    components = _components()
    asyncio.run(check_ready(components))
    assert _ready_value(components) == 1
    failing = _components(**state)
    failing.metrics = components.metrics
    with pytest.raises(error):
        asyncio.run(check_ready(failing))
    assert _ready_value(components) == 0


def test_rare_event_counters_start_at_0_for_every_known_label_value() -> None:
    """A counter whose series appears at 1 shows no ``increase``: a replica's first ejection or a
    Redis that just went away would be invisible to the alerts and the dashboard."""
    m = Metrics(Admission(lambda model: (1, 1), 1.0))
    m.replica_up("a:8001", True)
    m.start_key_limit_series()
    found = scrape(generate_latest(m.registry).decode())
    assert found[key("gateway_replica_retries_total", replica="a:8001")] == 0
    assert found[key("gateway_replica_ejections_total", replica="a:8001")] == 0
    for outcome in MIGRATION_OUTCOMES:
        assert found[key("gateway_stream_migrations_total", replica="a:8001", outcome=outcome)] == 0
    assert set(KEY_LIMIT_STEPS) == set(get_args(Step))
    for step in KEY_LIMIT_STEPS:
        assert found[key("gateway_key_limits_failures_total", step=step)] == 0


def test_a_replica_that_left_dns_has_no_in_rotation_series() -> None:
    """A Triton pod replaced in a rollout leaves an address behind: at 0 forever, it would keep an
    out-of-rotation alert firing for a replica that no longer exists."""
    m = Metrics(Admission(lambda model: (1, 1), 1.0))
    m.replica_up("a:8001", True)
    m.replica_up("b:8001", False)
    m.replica_left("b:8001")
    m.replica_left("c:8001")  # never seen: nothing to remove
    found = scrape(generate_latest(m.registry).decode())
    assert found[key("gateway_replica_up", replica="a:8001")] == 1
    assert key("gateway_replica_up", replica="b:8001") not in found
    m.replica_up("b:8001", True)  # back in DNS
    assert scrape(generate_latest(m.registry).decode())[key("gateway_replica_up", replica="b:8001")] == 1


LEFT = """
import sys
from types import SimpleNamespace
from prometheus_client import generate_latest
from gateway.metrics import Metrics

m = Metrics(SimpleNamespace(gates={}), shared=True)
m.replica_up("a:8001", True)
m.replica_up("b:8001", True)
m.replica_left("b:8001")
sys.stdout.write(generate_latest(m.registry).decode())
"""


def test_several_workers_leave_out_a_replica_that_left_dns(tmp_path: Path) -> None:
    text = run_worker(tmp_path, LEFT)
    found = scrape(text)
    assert found[key("gateway_replica_up", replica="a:8001")] == 1
    assert key("gateway_replica_up", replica="b:8001") not in found
    assert "nan" not in text.lower()


def test_the_watch_checks_only_when_nothing_else_did_for_its_interval() -> None:
    """Where probes come at least as often as the interval the watch adds no check of its own
    (each asks every replica and lists the models again); where none come, it keeps the gauge true.
    Loose counts where timers decide: the margins are 0.4 s and a whole interval."""
    components = _components()
    calls = []
    server_ready = components.backend.server_ready

    async def counted() -> bool:
        calls.append(time.monotonic())
        return await server_ready()

    components.backend.server_ready = counted

    async def scenario() -> None:
        watch = asyncio.create_task(watch_ready(components, 0.5))
        await asyncio.sleep(0.05)
        assert len(calls) == 1  # at once: the gauge is never left at its initial 0
        for _ in range(8):  # a probe every 0.1 s, well inside the interval
            await check_ready(components)
            await asyncio.sleep(0.1)
        assert len(calls) == 1 + 8
        await asyncio.sleep(1.3)  # no probes: the watch checks every 0.5 s
        assert 1 + 8 + 1 <= len(calls) <= 1 + 8 + 3
        watch.cancel()

    asyncio.run(scenario())
    assert _ready_value(components) == 1


def test_a_watch_interval_of_0_leaves_the_checks_to_the_probes() -> None:
    components = _components()
    asyncio.run(asyncio.wait_for(watch_ready(components, 0.0), 1.0))
    assert _ready_value(components) == 0
