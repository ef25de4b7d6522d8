"""The replica pool's observer in ``gateway.metrics``: stream migrations and each replica's engine
load, read back from the exposition a scrape returns, with one worker and with several."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from gateway.core.admission import Admission
from gateway.metrics import MIGRATION_BUCKETS, Metrics
from tests.unit.metrics_exposition import key, run_worker, scrape

ENGINE_SERIES = ("gateway_replica_engine_requests", "gateway_replica_kv_cache_usage", "vllm:kv_cache_usage_perc")


@dataclass(frozen=True, slots=True)
class Load:
    """The shape of ``backend.replicas.engine_load.EngineLoad``."""

    running: float
    waiting: float
    kv_usage: float | None


def metrics() -> Metrics:
    return Metrics(Admission(lambda model: (1, 1), 1.0))


def samples(m: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return scrape(generate_latest(m.registry).decode())


def of(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str) -> dict[frozenset[Any], float]:
    return {labels: value for (n, labels), value in found.items() if n == name}


# ---------------------------------------------------------------------------------------------
# migrations


def test_migrations_are_counted_by_failed_replica_and_outcome() -> None:
    m = metrics()
    m.migrated("10.0.0.1:8001", "continued", 0.2)
    m.migrated("10.0.0.1:8001", "continued", 0.03)
    m.migrated("10.0.0.1:8001", "failed", None)
    m.migrated("10.0.0.2:8001", "not_continuable", None)
    found = samples(m)
    total = "gateway_stream_migrations_total"
    assert found[key(total, replica="10.0.0.1:8001", outcome="continued")] == 2
    assert found[key(total, replica="10.0.0.1:8001", outcome="failed")] == 1
    assert found[key(total, replica="10.0.0.2:8001", outcome="not_continuable")] == 1
    assert key(total, replica="10.0.0.2:8001", outcome="continued") not in found


def test_only_continued_streams_time_their_pause() -> None:
    m = metrics()
    m.migrated("a:8001", "continued", 0.2)
    m.migrated("a:8001", "failed", 4.0)  # a figure with another outcome is not a pause the client saw
    m.migrated("a:8001", "not_continuable", None)
    m.migrated("a:8001", "continued", None)
    found = samples(m)
    assert found[key("gateway_stream_migration_seconds_count")] == 1
    assert found[key("gateway_stream_migration_seconds_sum")] == 0.2
    assert found[key("gateway_stream_migration_seconds_bucket", le="0.1")] == 0
    assert found[key("gateway_stream_migration_seconds_bucket", le="0.25")] == 1


def test_migration_pause_buckets_span_ten_milliseconds_to_ten_seconds() -> None:
    assert MIGRATION_BUCKETS[0] == 0.01 and MIGRATION_BUCKETS[-1] == 10.0
    assert list(MIGRATION_BUCKETS) == sorted(set(MIGRATION_BUCKETS))
    buckets = of(samples(metrics()), "gateway_stream_migration_seconds_bucket")
    assert {dict(labels)["le"] for labels in buckets} == {*(str(b) for b in MIGRATION_BUCKETS), "+Inf"}


# ---------------------------------------------------------------------------------------------
# engine load, one worker


def test_engine_load_is_shown_per_replica_model_and_state() -> None:
    m = metrics()
    m.engine_load("a:8001", {"llm": Load(3, 2, 0.5), "embed": Load(1, 0, None)})
    found = samples(m)
    requests = "gateway_replica_engine_requests"
    assert found[key(requests, replica="a:8001", model="llm", state="running")] == 3
    assert found[key(requests, replica="a:8001", model="llm", state="waiting")] == 2
    assert found[key(requests, replica="a:8001", model="embed", state="running")] == 1
    assert found[key(requests, replica="a:8001", model="embed", state="waiting")] == 0
    # KV use only where the backend reports one
    assert of(found, "gateway_replica_kv_cache_usage") == {frozenset({("replica", "a:8001"), ("model", "llm")}): 0.5}
    assert found[key("gateway_replica_metrics_up", replica="a:8001")] == 1


def test_a_later_read_replaces_the_figures() -> None:
    m = metrics()
    m.engine_load("a:8001", {"llm": Load(3, 2, 0.5)})
    m.engine_load("a:8001", {"llm": Load(1, 0, 0.125)})
    found = samples(m)
    assert found[key("gateway_replica_engine_requests", replica="a:8001", model="llm", state="running")] == 1
    assert found[key("gateway_replica_kv_cache_usage", replica="a:8001", model="llm")] == 0.125
    assert found[key("vllm:kv_cache_usage_perc", model_name="llm")] == 0.125


def test_a_replica_that_did_not_answer_keeps_no_per_model_series() -> None:
    m = metrics()
    m.engine_load("a:8001", {"llm": Load(3, 2, 0.5)})
    m.engine_load("b:8001", {"llm": Load(1, 1, 0.25)})
    m.engine_load("a:8001", None)
    found = samples(m)
    assert found[key("gateway_replica_metrics_up", replica="a:8001")] == 0
    assert found[key("gateway_replica_metrics_up", replica="b:8001")] == 1
    for name in ("gateway_replica_engine_requests", "gateway_replica_kv_cache_usage"):
        assert all(dict(labels)["replica"] == "b:8001" for labels in of(found, name)), name
    assert found[key("vllm:kv_cache_usage_perc", model_name="llm")] == 0.25
    # it answers again: its series are back
    m.engine_load("a:8001", {"llm": Load(0, 0, 0.75)})
    found = samples(m)
    assert found[key("gateway_replica_metrics_up", replica="a:8001")] == 1
    assert found[key("gateway_replica_engine_requests", replica="a:8001", model="llm", state="running")] == 0
    assert found[key("vllm:kv_cache_usage_perc", model_name="llm")] == 0.5


def test_a_model_or_kv_figure_no_longer_reported_leaves_no_series() -> None:
    m = metrics()
    m.engine_load("a:8001", {"llm": Load(3, 2, 0.5), "old": Load(1, 1, 0.9)})
    m.engine_load("a:8001", {"llm": Load(3, 2, None)})
    found = samples(m)
    assert {dict(labels)["model"] for labels in of(found, "gateway_replica_engine_requests")} == {"llm"}
    assert of(found, "gateway_replica_kv_cache_usage") == {}
    assert of(found, "vllm:kv_cache_usage_perc") == {}


def test_kv_cache_usage_perc_is_the_mean_over_replicas_that_report_one() -> None:
    m = metrics()
    m.engine_load("a:8001", {"llm": Load(0, 0, 0.25), "embed": Load(0, 0, 0.1)})
    m.engine_load("b:8001", {"llm": Load(0, 0, 0.75)})
    m.engine_load("c:8001", {"llm": Load(5, 5, None)})  # reports no KV figure: not in the mean
    m.engine_load("d:8001", None)
    found = samples(m)
    assert of(found, "vllm:kv_cache_usage_perc") == {
        frozenset({("model_name", "llm")}): 0.5,
        frozenset({("model_name", "embed")}): 0.1,
    }


def test_no_engine_figure_before_the_first_read_and_never_nan() -> None:
    m = metrics()
    text = generate_latest(m.registry).decode()
    assert "# TYPE vllm:kv_cache_usage_perc gauge" in text
    assert not any(of(scrape(text), name) for name in ENGINE_SERIES)
    m.engine_load("a:8001", {"llm": Load(3, 2, 0.5)})
    m.engine_load("a:8001", None)
    m.engine_load("a:8001", {"other": Load(1, 1, None)})
    assert "nan" not in generate_latest(m.registry).decode().lower()


def test_the_vllm_queue_gauges_stay_the_gateways_own_view() -> None:
    """The engine's waiting requests hold the gateway's slots already (its ``running``): the
    ``vllm:num_requests_*`` gauges the endpoint picker reads are the gateway's counts only."""
    m = metrics()
    m.engine_load("a:8001", {"m": Load(7, 9, 0.5)})
    found = samples(m)
    assert of(found, "vllm:num_requests_waiting") == of(found, "vllm:num_requests_running") == {}


def test_repeated_reads_look_each_series_up_once() -> None:
    """Once a second per replica on the event loop: ``labels()`` only for a series not seen yet."""
    m = metrics()
    m.engine_load("a:8001", {"llm": Load(3, 2, 0.5)})
    children = dict(m._engine._children)
    for _ in range(3):
        m.engine_load("a:8001", {"llm": Load(1, 1, 0.25)})
    assert m._engine._children == children


# ---------------------------------------------------------------------------------------------
# several workers: prometheus-client's multiprocess files, one process per worker

WORKER = """
import json, sys
from dataclasses import dataclass
from types import SimpleNamespace
from prometheus_client import generate_latest
from gateway.metrics import Metrics

@dataclass(frozen=True)
class Load:
    running: float
    waiting: float
    kv_usage: float | None

m = Metrics(SimpleNamespace(gates={}), shared=True)
for step in json.loads(sys.argv[1]):
    if step[0] == "load":
        loads = None if step[2] is None else {model: Load(*load) for model, load in step[2].items()}
        m.engine_load(step[1], loads)
    elif step[0] == "migrated":
        m.migrated(step[1], step[2], step[3])
    else:
        sys.stdout.write(generate_latest(m.registry).decode())
"""


def worker(directory: Path, *steps: list[Any]) -> str:
    """One worker process doing ``steps`` in the shared directory; its stdout (a scrape's text)."""
    return run_worker(directory, WORKER, steps)


def test_several_workers_show_the_latest_read_not_a_sum(tmp_path: Path) -> None:
    worker(
        tmp_path,
        ["load", "a:8001", {"llm": [5, 4, 0.5]}],
        ["load", "b:8001", {"llm": [2, 0, 0.25]}],
        ["migrated", "a:8001", "continued", 0.2],
    )
    text = worker(
        tmp_path,
        ["load", "a:8001", {"llm": [1, 0, 0.75]}],
        ["load", "b:8001", None],  # this worker never saw b answer, the other one did
        ["migrated", "a:8001", "continued", 0.4],
        ["scrape"],
    )
    found = scrape(text)
    assert found[key("gateway_replica_engine_requests", replica="a:8001", model="llm", state="running")] == 1
    assert found[key("gateway_replica_engine_requests", replica="a:8001", model="llm", state="waiting")] == 0
    assert found[key("gateway_replica_kv_cache_usage", replica="a:8001", model="llm")] == 0.75
    assert found[key("gateway_replica_metrics_up", replica="a:8001")] == 1
    # b did not answer the later read: the first worker's older figures for it are left out
    assert found[key("gateway_replica_metrics_up", replica="b:8001")] == 0
    for name in ("gateway_replica_engine_requests", "gateway_replica_kv_cache_usage"):
        assert all(dict(labels)["replica"] == "a:8001" for labels in of(found, name)), name
    assert of(found, "vllm:kv_cache_usage_perc") == {frozenset({("model_name", "llm")}): 0.75}
    # counters and histograms add up over the workers
    assert found[key("gateway_stream_migrations_total", replica="a:8001", outcome="continued")] == 2
    assert found[key("gateway_stream_migration_seconds_count")] == 2
    assert "nan" not in text.lower()


def test_several_workers_drop_a_series_a_later_read_found_gone(tmp_path: Path) -> None:
    worker(tmp_path, ["load", "a:8001", {"llm": [5, 4, 0.5], "old": [1, 1, 0.9]}])
    text = worker(
        tmp_path,
        ["load", "a:8001", {"llm": [5, 4, 0.5], "old": [1, 1, 0.9]}],
        ["load", "a:8001", {"llm": [2, 2, None]}],
        ["scrape"],
    )
    found = scrape(text)
    assert {dict(labels)["model"] for labels in of(found, "gateway_replica_engine_requests")} == {"llm"}
    assert found[key("gateway_replica_engine_requests", replica="a:8001", model="llm", state="running")] == 2
    assert of(found, "gateway_replica_kv_cache_usage") == {}
    assert of(found, "vllm:kv_cache_usage_perc") == {}
