"""A replica's score in the pool: the engine's last read, moved by what was placed since, and not
trusted once its metrics stop answering (pure logic: no HTTP, the read's result is given)."""

from __future__ import annotations

import time

import pytest

from gateway.backend.replicas import pool as pool_module
from gateway.backend.replicas.engine_load import EngineLoad, replica_load
from gateway.backend.replicas.pool import Replica, metrics_url


def replica(**fields: object) -> Replica:
    return Replica("10.0.0.1:8001", backend=None, metrics_url="http://10.0.0.1:8002/metrics", **fields)  # type: ignore[arg-type]


def test_the_metrics_endpoint_is_the_replica_s_host_on_the_metrics_port() -> None:
    assert metrics_url("10.0.0.1:8001", 8002) == "http://10.0.0.1:8002/metrics"
    assert metrics_url("[fd00::1]:8001", 9000) == "http://[fd00::1]:9000/metrics"
    assert metrics_url("triton:8001", None) is None


def test_what_was_placed_since_the_read_counts_as_running_there() -> None:
    now = time.monotonic()
    r = replica(in_flight=2, engine=EngineLoad(5, 0, None), engine_read_at=now, in_flight_at_read=2, stale_after=3)
    assert r.load == replica_load(2, EngineLoad(5, 0, None), True)
    r.in_flight = 6  # four placed since the read: the engine's 5 is now 9
    assert r.load == replica_load(6, EngineLoad(9, 0, None), True)


def test_a_replica_whose_metrics_stopped_answering_is_scored_down(monkeypatch: pytest.MonkeyPatch) -> None:
    read_at = time.monotonic()
    r = replica(in_flight=1, engine=EngineLoad(1, 0, 0.5), engine_read_at=read_at, in_flight_at_read=1, stale_after=3)
    fresh = r.load
    monkeypatch.setattr(pool_module.time, "monotonic", lambda: read_at + 3.5)
    assert not r.trusted
    assert r.load > fresh
    assert r.load == replica_load(1, EngineLoad(1, 0, 0.5), False)


def test_a_replica_whose_metrics_are_not_read_or_never_answered_is_its_own_count() -> None:
    r = Replica("10.0.0.1:8001", backend=None, in_flight=3)  # type: ignore[arg-type]
    assert r.trusted and r.load == 3
    never = replica(in_flight=3, stale_after=3)  # a metrics port nothing answers on
    assert never.trusted and never.load == 3
