"""Prometheus metrics, in a registry of the app's own (no global state between apps in a process).

Per request, its ``core.outcome.RequestOutcome`` fills one ``RequestRecord`` (plain attributes, no
locks) and hands it to ``Metrics.finish`` once (a request refused before it had one is counted by
``Metrics.rejected``); per backend chunk only the inter-token gap is tallied (``GapTally``). Gauges that
describe the present (in flight, waiting, the ``vllm:*`` names the Kubernetes Gateway API
Inference Extension scrapes) are computed at scrape time from the admission state, so requests
never touch them.

With several workers (``--workers``) every process writes its counters and histograms into
prometheus-client's multiprocess directory (``PROMETHEUS_MULTIPROC_DIR``, set by
``gateway.workers``) and a scrape, whichever worker answers it, adds up all of them. The present
is per worker, so each worker publishes its admission counts into ``livesum`` gauges (summed over
the workers alive) every ``LIVE_PUBLISH_INTERVAL`` and right before it answers a scrape; the
``vllm:lora_requests_info`` line is built from their per-adapter sums.

What each replica's engine reports (``Metrics.engine_load``, after every read of Triton's metrics)
goes into ``livemostrecent`` gauges: every worker reads the same replicas, so the scrape shows the
latest read instead of one engine counted once per worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class PlacementView(Protocol):
    """Where the backend ran a request (``backend.types.Placement``), as the request line shows it."""

    @property
    def replica(self) -> str | None: ...
    @property
    def route(self) -> str | None: ...


class GateView(Protocol):
    """One model's admission counts (``core.admission.ModelGate``), read at scrape time."""

    @property
    def limit(self) -> int: ...

    @property
    def queue_size(self) -> int: ...

    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def running_adapters(self) -> Mapping[str, int]: ...
    @property
    def waiting_adapters(self) -> Mapping[str, int]: ...


class EngineLoadView(Protocol):
    """One model's load as a replica's engine reported it (``backend.replicas.engine_load.EngineLoad``)."""

    @property
    def running(self) -> float: ...
    @property
    def waiting(self) -> float: ...
    @property
    def kv_usage(self) -> float | None: ...


class AdmissionView(Protocol):
    """The admission state the live gauges describe (``core.admission.Admission``). Protocols
    rather than imports: metrics is a leaf the core writes into, so it must not import the core."""

    @property
    def gates(self) -> Mapping[str, GateView]: ...


LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MIGRATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""A migrated stream's pause: a prefill of prompt plus replayed tokens elsewhere, 10 ms to 10 s."""
MIGRATION_OUTCOMES = ("continued", "failed", "not_continuable")
"""The ``outcome`` label of ``gateway_stream_migrations_total`` (``backend.replicas.stream``)."""
KEY_LIMIT_STEPS = ("admit", "charge", "release", "renew")
"""The ``step`` label of ``gateway_key_limits_failures_total`` (``keys.counts.Step``)."""
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)
GAP_FLUSH_EVERY = 64
"""A stream's inter-token gaps reach the histogram in one go every this many (and at its end)."""
LIVE_PUBLISH_INTERVAL = 0.05
"""Seconds between a worker's writes of its admission counts (several workers only): as often as
the Inference Extension's endpoint picker scrapes by default, so its view is as fresh as ours."""


class GapTally:
    """One stream's inter-token gaps, counted into the histogram's buckets as plain integers and
    added to the shared series every ``GAP_FLUSH_EVERY`` gaps and when the request ends. An
    ``observe`` per token took a lock and two increments: ~6 % of the gateway's CPU per token at
    64 streams (py-spy). The buckets and the sum are the same as observing each gap; only when
    a long stream's gaps show up in a scrape moves (by at most ``GAP_FLUSH_EVERY`` gaps).

    It writes into prometheus-client's ``Histogram`` child (``_upper_bounds``, ``_buckets``,
    ``_sum``: the same since 0.4, and the multiprocess values behind them take ``inc(n)`` too);
    ``test_tallied_gaps_fill_the_same_buckets_and_sum_as_observing_each`` fails if they move."""

    __slots__ = ("_series", "_bounds", "_counts", "_sum", "_pending")

    def __init__(self, series: Histogram) -> None:
        self._series = series
        self._bounds: list[float] = series._upper_bounds
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._pending = 0

    def add(self, gap: float) -> None:
        # The first bound >= gap: Histogram.observe's ``amount <= bound`` (the last bound is +Inf).
        self._counts[bisect_left(self._bounds, gap)] += 1
        self._sum += gap
        self._pending += 1
        if self._pending >= GAP_FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        buckets, counts = self._series._buckets, self._counts
        for i, count in enumerate(counts):
            if count:
                buckets[i].inc(count)
                counts[i] = 0
        self._series._sum.inc(self._sum)
        self._sum = 0.0
        self._pending = 0


@dataclass(slots=True)
class RequestRecord:
    """What one request did, for metrics and the request log line."""

    request_id: str
    endpoint: str
    model: str
    adapter: str | None
    stream: bool
    started: float = field(default_factory=time.perf_counter)
    first_token: float | None = None
    last_token: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    status: int = 200
    cancel_reason: str | None = None
    error_type: str | None = None
    placement: PlacementView | None = None
    """Where the backend ran it (the replica pool fills it in)."""
    key: str | None = None
    """The name of the API key it came with (None: no key, or one without a name)."""
    priority: int = 0
    """The band it ran in (``core.schedule``)."""
    queue_wait: float | None = None
    """Seconds it waited for a slot (None: it never got one)."""


_LIVE = (
    ("gateway_requests_running", "Requests holding a slot (sent to Triton)", "model", "running"),
    ("gateway_requests_waiting", "Requests waiting in the gateway's queue", "model", "waiting"),
    ("vllm:num_requests_running", "Requests running on the model (gateway's view)", "model_name", "running"),
    ("vllm:num_requests_waiting", "Requests waiting for the model (gateway's view)", "model_name", "waiting"),
    (
        "gateway_requests_running_limit",
        "The model's slots: requests sent to Triton at once (0: no limit)",
        "model",
        "limit",
    ),
    (
        "gateway_requests_waiting_limit",
        "The model's queue capacity: requests that may wait for a slot",
        "model",
        "queue_size",
    ),
)
"""The gauges of the present: name, help, label, and the admission count (``GateView``) each shows.
The limits are there so that a dashboard or an alert reads "the queue is 90 % full" from the
scrape alone; with several workers each worker's share is published and the shares add up to the
configured figure (``core.admission.worker_share``)."""


class _LiveGauges(Collector):
    """Gauges read from admission state at scrape time."""

    def __init__(self, admission: AdmissionView, adapters: Callable[[str], int]) -> None:
        self._admission = admission
        self._adapters = adapters

    def collect(self) -> Iterator[Metric]:
        families = [(GaugeMetricFamily(name, doc, labels=[label]), shows) for name, doc, label, shows in _LIVE]
        lora, now = _lora_family(), time.time()
        for model, gate in sorted(self._admission.gates.items()):
            for family, shows in families:
                family.add_metric([model], getattr(gate, shows))
            running, waiting = ",".join(sorted(gate.running_adapters)), ",".join(sorted(gate.waiting_adapters))
            lora.add_metric([model, running, waiting, str(self._adapters(model))], now)
        yield from (family for family, _ in families)
        yield lora


def _lora_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "vllm:lora_requests_info",
        "Running and waiting LoRA adapters (value: scrape time), as vLLM reports them; max_lora is "
        "the number of adapters the model serves (Triton loads them all at model load)",
        labels=["model_name", "running_lora_adapters", "waiting_lora_adapters", "max_lora"],
    )


class _SharedLiveGauges(Collector):
    """Several workers: each worker's admission counts in ``livesum`` gauges, and the scrape of all
    workers' files (``MultiProcessCollector``) with ``vllm:lora_requests_info`` built from them and
    the engine series as ``_present_engine`` leaves them."""

    def __init__(self, admission: AdmissionView, adapters: Callable[[str], int]) -> None:
        self._admission = admission
        self._adapters = adapters
        self._published: object = None
        self._adapter_series: set[tuple[str, str, str]] = set()

        self._gauges = [
            (Gauge(name, doc, [label], multiprocess_mode="livesum", registry=None), shows)
            for name, doc, label, shows in _LIVE
        ]
        self._by_adapter = Gauge(
            "gateway_adapter_requests",
            "Requests per LoRA adapter, running or waiting (feeds vllm:lora_requests_info)",
            ["model", "adapter", "state"],
            multiprocess_mode="livesum",
            registry=None,
        )

    def publish(self) -> None:
        """Write this worker's counts, when they changed since the last write."""
        gates = list(self._admission.gates.items())
        snapshot = [
            (
                model,
                [getattr(g, shows) for _, shows in self._gauges],
                dict(g.running_adapters),
                dict(g.waiting_adapters),
            )
            for model, g in gates
        ]
        if snapshot == self._published:
            return
        self._published = snapshot
        series: set[tuple[str, str, str]] = set()
        for model, figures, running_adapters, waiting_adapters in snapshot:
            for (gauge, _), figure in zip(self._gauges, figures, strict=True):
                gauge.labels(model).set(figure)
            for state, counts in (("running", running_adapters), ("waiting", waiting_adapters)):
                for adapter, count in counts.items():
                    self._by_adapter.labels(model, adapter, state).set(count)
                    series.add((model, adapter, state))
        for gone in self._adapter_series - series:
            self._by_adapter.labels(*gone).set(0)
        self._adapter_series |= series

    async def publish_forever(self) -> None:
        while True:
            self.publish()
            await asyncio.sleep(LIVE_PUBLISH_INTERVAL)

    def describe(self) -> list[Metric]:
        return []  # names vary with the files; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.multiprocess import MultiProcessCollector

        self.publish()
        models: set[str] = set()
        adapters: dict[tuple[str, str], list[str]] = {}
        merged: Iterable[Metric] = MultiProcessCollector(None).collect()  # type: ignore[no-untyped-call]
        for family in _present_engine(merged):
            if family.name == "gateway_requests_running":
                models.update(sample.labels["model"] for sample in family.samples)
            if family.name == "gateway_adapter_requests":
                for sample in family.samples:
                    if sample.value > 0:
                        key = (sample.labels["model"], sample.labels["state"])
                        adapters.setdefault(key, []).append(sample.labels["adapter"])
            yield family
        lora, now = _lora_family(), time.time()
        for model in sorted(models):
            running = ",".join(sorted(adapters.get((model, "running"), [])))
            waiting = ",".join(sorted(adapters.get((model, "waiting"), [])))
            lora.add_metric([model, running, waiting, str(self._adapters(model))], now)
        yield lora


def labelled(children: dict[Any, Any], metric: Counter | Gauge | Histogram, labels: tuple[str, ...]) -> Any:
    """``metric.labels(*labels)``, made once per label set and kept in ``children``: the lookup
    ``labels`` does each time costs more than a dict's."""
    key = (metric, labels)
    child = children.get(key)
    if child is None:
        child = children[key] = metric.labels(*labels)
    return child


_ENGINE_REQUESTS = "gateway_replica_engine_requests"
_ENGINE_KV_USAGE = "gateway_replica_kv_cache_usage"
_ENGINE_UP = "gateway_replica_metrics_up"
_REPLICA_UP = "gateway_replica_up"
_GONE = math.nan
"""What an engine series that went away is set to (and, with several workers, a replica's
``gateway_replica_up`` once it left DNS): prometheus-client cannot remove a series from the
workers' files, so one worker or several, a gone engine series is written as NaN and left out
at scrape time (``_present_engine``)."""


class _EngineGauges(Collector):
    """Each replica's engine load as its last metrics read left it (``Metrics.engine_load``).
    ``livemostrecent``: each worker reads the same replicas, so the latest read of any live
    worker is the figure, not a sum that counts one engine once per worker. With one worker it
    is itself the collector (through ``_present_engine``); with several the files are."""

    def __init__(self) -> None:
        self.requests = Gauge(
            _ENGINE_REQUESTS,
            "Requests the replica's engine reported at the last read of its metrics, by model and state "
            "(running; waiting: queued in Triton or in the engine), from every client, not only this gateway",
            ["replica", "model", "state"],
            multiprocess_mode="livemostrecent",
            registry=None,
        )
        self.kv_usage = Gauge(
            _ENGINE_KV_USAGE,
            "Fraction (0..1) of the replica's KV cache in use at the last read of its metrics, by model, "
            "where its backend reports one",
            ["replica", "model"],
            multiprocess_mode="livemostrecent",
            registry=None,
        )
        self.up = Gauge(
            _ENGINE_UP,
            "1 when the replica's Triton metrics answered at the last read, 0 when they did not",
            ["replica"],
            multiprocess_mode="livemostrecent",
            registry=None,
        )
        self._children: dict[tuple[Gauge, tuple[str, ...]], Gauge] = {}
        self._models: dict[str, set[str]] = {}
        """Per replica, the models whose request series hold a figure (not NaN)."""
        self._kv_models: dict[str, set[str]] = {}
        """Per replica, the models whose KV series holds a figure."""

    def _child(self, gauge: Gauge, *labels: str) -> Gauge:
        return labelled(self._children, gauge, labels)  # type: ignore[no-any-return]

    def record(self, replica: str, loads: Mapping[str, EngineLoadView] | None) -> None:
        self._child(self.up, replica).set(0 if loads is None else 1)
        loads = loads or {}
        kv_models: set[str] = set()
        for model, load in loads.items():
            self._child(self.requests, replica, model, "running").set(load.running)
            self._child(self.requests, replica, model, "waiting").set(load.waiting)
            if load.kv_usage is not None:
                self._child(self.kv_usage, replica, model).set(load.kv_usage)
                kv_models.add(model)
        for model in self._models.get(replica, set()) - loads.keys():
            self._child(self.requests, replica, model, "running").set(_GONE)
            self._child(self.requests, replica, model, "waiting").set(_GONE)
        for model in self._kv_models.get(replica, set()) - kv_models:
            self._child(self.kv_usage, replica, model).set(_GONE)
        self._models[replica] = set(loads)
        self._kv_models[replica] = kv_models

    def collect(self) -> Iterator[Metric]:
        yield from _present_engine([*self.requests.collect(), *self.kv_usage.collect(), *self.up.collect()])


def _present_engine(families: Iterable[Metric]) -> Iterator[Metric]:
    """``families`` without the engine series that went away (NaN) or belong to a replica whose
    metrics did not answer at the last read (with several workers, one worker's older read can
    still hold figures another's newer read found gone), then ``vllm:kv_cache_usage_perc`` built
    from the KV series left: per model, the mean over the replicas that reported one. In sidecar
    mode (the InferencePool's) the pod's one Triton is the only replica, and the figure is its
    engine's; with several replicas the mean is what the pod as a whole offers. A replica that
    left DNS (NaN in ``gateway_replica_up``) is left out too."""
    families = list(families)
    down = {s.labels["replica"] for f in families if f.name == _ENGINE_UP for s in f.samples if s.value == 0}
    usage: dict[str, list[float]] = {}
    for family in families:
        if family.name in (_ENGINE_REQUESTS, _ENGINE_KV_USAGE):
            family.samples = [s for s in family.samples if not math.isnan(s.value) and s.labels["replica"] not in down]
        if family.name == _REPLICA_UP:  # several workers: a replica that left DNS (``replica_left``)
            family.samples = [s for s in family.samples if not math.isnan(s.value)]
        if family.name == _ENGINE_KV_USAGE:
            for sample in family.samples:
                usage.setdefault(sample.labels["model"], []).append(sample.value)
        yield family
    kv = GaugeMetricFamily(
        "vllm:kv_cache_usage_perc",
        "Fraction (0..1) of the model's KV cache in use, as its engine reports it (the mean over the "
        "replicas that reported one at their last read), as vLLM names it",
        labels=["model_name"],
    )
    for model, values in sorted(usage.items()):
        kv.add_metric([model], sum(values) / len(values))
    yield kv


_Series = tuple[Counter, Histogram, Histogram, Histogram, Histogram, Counter, Counter]


class Metrics:
    """The gateway's collectors. ``shared``: one of several workers (``PROMETHEUS_MULTIPROC_DIR``
    set before ``prometheus_client`` was imported); ``registry`` then scrapes every worker."""

    def __init__(
        self, admission: AdmissionView, adapters: Callable[[str], int] = lambda model: 0, *, shared: bool = False
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry if not shared else CollectorRegistry()  # shared: the files are the registry
        self._add_request_series(r)
        self._add_total_series(r)
        self._add_replica_series(r)
        self._add_key_series(r)
        self._add_schedule_series(r)
        self._add_job_series(r)
        self.background_responses = Counter(
            "gateway_background_responses",
            "Background responses (background: true) that reached each status: queued at their POST, "
            "in_progress once admitted, then completed, incomplete, failed or cancelled",
            ["status"],
            registry=r,
        )
        self.ready_gauge = Gauge(
            "gateway_ready",
            "1 when the gateway's readiness check (what /health/ready answers) passed at its last run, else 0",
            multiprocess_mode="livemostrecent",
            registry=r,
        )
        self.ready_at = -math.inf
        """When the last readiness check ended (``time.monotonic``), for ``http.readiness``'s watch."""
        self._children: dict[tuple[Counter | Gauge | Histogram, tuple[str, ...]], Any] = {}
        """The replica series every request moves (``_child``), by metric and label values, as
        ``_finished`` below: ``labels()`` costs ~2 µs, and three of these are on the path to
        Triton. No series is ever removed, so a child found here is the registry's."""
        self._gap_series: dict[str, Histogram] = {}
        """Each model's inter-token latency series, for ``gap_tally``."""
        self._finished: dict[tuple[str, str, str, bool, int], _Series] = {}
        """``finish``'s series by (model, adapter, endpoint, stream, status): as many as the
        label sets the registry already keeps."""
        self._engine = _EngineGauges()
        self._replicas_seen: set[str] = set()
        self.shared_live: _SharedLiveGauges | None = None
        if shared:
            self.shared_live = _SharedLiveGauges(admission, adapters)
            self.registry.register(self.shared_live)
        else:
            r.register(_LiveGauges(admission, adapters))
            r.register(self._engine)

    def _add_request_series(self, r: CollectorRegistry) -> None:
        """Per request: answered counts, latencies, prompt and completion sizes."""
        self.requests = Counter(
            "gateway_requests",
            "Requests answered",
            ["model", "adapter", "endpoint", "stream", "status"],
            registry=r,
        )
        self.time_to_first_token = Histogram(
            "gateway_time_to_first_token_seconds",
            "From request arrival to the first generated text",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inter_token_latency = Histogram(
            "gateway_inter_token_latency_seconds",
            "Gap between two backend responses of one stream",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.request_duration = Histogram(
            "gateway_request_duration_seconds",
            "End-to-end request latency",
            ["model", "endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens_per_request = Histogram(
            "gateway_request_prompt_tokens",
            "Prompt tokens per request",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.completion_tokens_per_request = Histogram(
            "gateway_request_completion_tokens",
            "Completion tokens per request",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )

    def _add_total_series(self, r: CollectorRegistry) -> None:
        """Running totals: tokens per model and adapter, cancellations by reason, backend errors."""
        self.prompt_tokens = Counter(
            "gateway_prompt_tokens", "Prompt tokens processed", ["model", "adapter"], registry=r
        )
        self.completion_tokens = Counter(
            "gateway_completion_tokens",
            "Completion tokens generated",
            ["model", "adapter"],
            registry=r,
        )
        self.cancellations = Counter(
            "gateway_cancellations",
            "Backend work cancelled before it finished, by reason",
            ["reason"],
            registry=r,
        )
        self.backend_errors = Counter(
            "gateway_backend_errors",
            "Errors from Triton, by type",
            ["type"],
            registry=r,
        )

    def _add_replica_series(self, r: CollectorRegistry) -> None:
        """Per Triton replica (``backend.replicas``): counted when it happens, per request at most.
        With several workers the gauges add up (in flight) or take the highest (in rotation: 1
        when any worker has it in rotation)."""
        self.replica_routed = Counter(
            "gateway_replica_routed", "Requests placed on a Triton replica, by route", ["replica", "route"], registry=r
        )
        self.replica_affinity_hits = Counter(
            "gateway_replica_affinity_hits",
            "Keyed requests (session or prefix) served by their key's home replica",
            ["replica"],
            registry=r,
        )
        self.replica_retries = Counter(
            "gateway_replica_retries",
            "Requests that failed on this replica before their first token and were retried on another",
            ["replica"],
            registry=r,
        )
        self.replica_ejections = Counter(
            "gateway_replica_ejections", "Times this replica was taken out of rotation", ["replica"], registry=r
        )
        self.replica_in_flight_gauge = Gauge(
            "gateway_replica_in_flight",
            "Generations running on this replica",
            ["replica"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.replica_up_gauge = Gauge(
            _REPLICA_UP, "1 while in rotation", ["replica"], multiprocess_mode="livemax", registry=r
        )
        self.stream_migrations = Counter(
            "gateway_stream_migrations",
            "Streams whose replica (this one) failed mid-stream, by outcome (continued: went on on another "
            "replica; failed: no replica could continue it; not_continuable: its contract cannot continue it, "
            "or it had moved migration_limit times)",
            ["replica", "outcome"],
            registry=r,
        )
        self.stream_migration_seconds = Histogram(
            "gateway_stream_migration_seconds",
            "The pause a continued stream's client saw: from its replica's failure to the first tokens "
            "of the replica that continued it",
            buckets=MIGRATION_BUCKETS,
            registry=r,
        )

    def _add_key_series(self, r: CollectorRegistry) -> None:
        """Per named API key (``gateway.keys``): usage and refusals, by the key's name, never the key."""
        self.key_requests = Counter(
            "gateway_key_requests", "Requests answered, by API key name", ["key", "model", "status"], registry=r
        )
        self.key_prompt_tokens = Counter(
            "gateway_key_prompt_tokens", "Prompt tokens, by API key name", ["key", "model"], registry=r
        )
        self.key_completion_tokens = Counter(
            "gateway_key_completion_tokens", "Completion tokens, by API key name", ["key", "model"], registry=r
        )
        self.key_rate_limited = Counter(
            "gateway_key_rate_limited",
            "Requests refused with 429 by a key's limit (concurrency, requests or tokens)",
            ["key", "limit"],
            registry=r,
        )
        self.key_limits_failures = Counter(
            "gateway_key_limits_failures",
            "Steps the key limits' store could not count (Redis unreachable, the workers' file busy or broken)",
            ["step"],
            registry=r,
        )

    def _add_schedule_series(self, r: CollectorRegistry) -> None:
        """The scheduler (``core.admission``): how long each key and band waited, and who was refused."""
        self.queue_wait = Histogram(
            "gateway_queue_wait_seconds",
            "Seconds from admission's first look to a slot, by model, API key name and priority band "
            "(0 when a slot was free)",
            ["model", "key", "band"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.requests_shed = Counter(
            "gateway_requests_shed",
            "Requests the scheduler refused with 429 before Triton, by band and reason "
            "(sheddable, queue_full, displaced, deadline, timeout)",
            ["model", "band", "reason"],
            registry=r,
        )

    def _add_job_series(self, r: CollectorRegistry) -> None:
        """The Batch API (``gateway.jobs``): lines ended here, lines running here, and every
        gateway's view of the store (the same figures from each: read them with ``max``)."""
        self.batch_lines = Counter(
            "gateway_batch_lines",
            "Batch lines this gateway ended, by result (completed: answered 2xx; failed: answered "
            "otherwise; cancelled; retried: a transient failure, tried again later)",
            ["result"],
            registry=r,
        )
        self.batch_lines_running_gauge = Gauge(
            "gateway_batch_lines_running", "Batch lines this gateway runs now", multiprocess_mode="livesum", registry=r
        )
        self.batch_lines_open = Gauge(
            "gateway_batch_lines_open",
            "Lines of the store's open batches, by state (pending: queued or running)",
            ["state"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.batches_gauge = Gauge(
            "gateway_batches", "Batches in the store, by status", ["status"], multiprocess_mode="livemax", registry=r
        )

    def batch_line_ended(self, result: str) -> None:
        self._child(self.batch_lines, result).inc()

    def batch_lines_running(self, count: int) -> None:
        self.batch_lines_running_gauge.set(count)

    def batch_census(self, batches: dict[str, int], lines: dict[str, int]) -> None:
        """The store's counts; a status or state no longer seen goes to 0, not away."""
        for status in ("in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled", *batches):
            self._child(self.batches_gauge, status).set(batches.get(status, 0))
        for state in ("pending", "done", "error", "cancelled", "expired", *lines):
            self._child(self.batch_lines_open, state).set(lines.get(state, 0))

    def ready(self, ok: bool) -> None:
        """The verdict of a readiness check (``http.readiness``)."""
        self.ready_gauge.set(1 if ok else 0)
        self.ready_at = time.monotonic()

    def queued(self, model: str, key: str | None, band: int, seconds: float) -> None:
        """A request got its slot after ``seconds`` in the queue."""
        self._child(self.queue_wait, model, key or "", str(band)).observe(seconds)

    def background_response(self, status: str) -> None:
        """A background response reached ``status``."""
        self._child(self.background_responses, status).inc()

    def shed(self, model: str, band: int, reason: str) -> None:
        """A request refused by the scheduler."""
        self.requests_shed.labels(model, str(band), reason).inc()

    def _child(self, metric: Counter | Gauge | Histogram, *labels: str) -> Any:
        return labelled(self._children, metric, labels)

    def routed(self, replica: str, route: str, home: bool | None) -> None:
        self._child(self.replica_routed, replica, route).inc()
        if home:
            self._child(self.replica_affinity_hits, replica).inc()

    def retried(self, replica: str) -> None:
        self.replica_retries.labels(replica).inc()

    def ejected(self, replica: str) -> None:
        self.replica_ejections.labels(replica).inc()

    def replica_up(self, replica: str, up: bool) -> None:
        if replica not in self._replicas_seen:
            self._replicas_seen.add(replica)
            self._start_replica_series(replica)
        self.replica_up_gauge.labels(replica).set(1 if up else 0)

    def replica_left(self, replica: str) -> None:
        """A replica gone from DNS (a Triton pod replaced) loses its in-rotation series, so that an
        alert on a replica out of rotation does not fire for an address that no longer exists. The
        workers' files cannot lose a series: there it is NaN, left out at scrape time."""
        if self.shared_live is None:
            with contextlib.suppress(KeyError):
                self.replica_up_gauge.remove(replica)
        else:
            self.replica_up_gauge.labels(replica).set(_GONE)

    def _start_replica_series(self, replica: str) -> None:
        """A replica's counters of rare events at 0 from the moment it joins, as Prometheus
        advises for label values known in advance: ``rate`` and ``increase`` then count its first
        retry, ejection or migration (a series that appears at 1 is read as no change), and a
        dashboard shows 0 instead of "no data"."""
        for counter in (self.replica_retries, self.replica_ejections):
            self._child(counter, replica)
        for outcome in MIGRATION_OUTCOMES:
            self._child(self.stream_migrations, replica, outcome)

    def replica_in_flight(self, replica: str, delta: int) -> None:
        self._child(self.replica_in_flight_gauge, replica).inc(delta)

    def migrated(self, replica: str, outcome: str, seconds: float | None) -> None:
        """A stream whose ``replica`` failed mid-stream; ``seconds`` (outcome ``continued`` only):
        from the failure to the first tokens from the replica that continued it."""
        self._child(self.stream_migrations, replica, outcome).inc()
        if outcome == "continued" and seconds is not None:
            self.stream_migration_seconds.observe(seconds)

    def engine_load(self, replica: str, loads: Mapping[str, EngineLoadView] | None) -> None:
        """After each read of ``replica``'s metrics (None: it did not answer, and keeps no
        per-model series). Once a second per replica, on the event loop: a few ``set`` calls."""
        self._engine.record(replica, loads)

    def cancelled(self, reason: str) -> None:
        self.cancellations.labels(reason).inc()

    def rejected(self, endpoint: str, status: int) -> None:
        """A completion request refused before it had an outcome (``http.rejections``): its model,
        adapter and stream labels are empty. Never the model the client named: an unknown name
        as a label value would let clients create series at will."""
        self.requests.labels("", "", endpoint, "", str(status)).inc()

    def finish(self, record: RequestRecord) -> None:
        now = time.perf_counter()
        key = (record.model, record.adapter or "", record.endpoint, record.stream, record.status)
        series = self._finished.get(key)
        if series is None:
            series = self._finished[key] = self._finished_series(*key)
        requests, duration, first_token, prompt_sizes, completion_sizes, prompt_tokens, completion_tokens = series
        requests.inc()
        duration.observe(now - record.started)
        if record.first_token is not None:
            first_token.observe(record.first_token - record.started)
        prompt_sizes.observe(record.prompt_tokens)
        completion_sizes.observe(record.completion_tokens)
        prompt_tokens.inc(record.prompt_tokens)
        completion_tokens.inc(record.completion_tokens)
        if record.cancel_reason is not None:
            self.cancelled(record.cancel_reason)
        if record.error_type is not None and record.status >= 500:
            self.backend_errors.labels(record.error_type).inc()
        if record.key is not None:
            self._child(self.key_requests, record.key, record.model, str(record.status)).inc()
            self._child(self.key_prompt_tokens, record.key, record.model).inc(record.prompt_tokens)
            self._child(self.key_completion_tokens, record.key, record.model).inc(record.completion_tokens)

    def limited(self, key: str, limit: str) -> None:
        """A named key's request refused by one of its limits."""
        self._child(self.key_rate_limited, key, limit).inc()

    def start_key_limit_series(self) -> None:
        """Each step's failure count at 0 from the start (as ``_start_replica_series``): an alert on
        its ``rate`` then sees the first failure of a Redis that went away."""
        for step in KEY_LIMIT_STEPS:
            self._child(self.key_limits_failures, step)

    def key_limits_failed(self, step: str) -> None:
        """The key limits' store could not ``admit``, ``charge``, ``release`` or ``renew`` (any
        thread: the workers' file fails on its own)."""
        self.key_limits_failures.labels(step).inc()

    def gap_tally(self, model: str) -> GapTally:
        """A stream's inter-token gaps, for ``model`` (flushed by the caller when it ends)."""
        series = self._gap_series.get(model)
        if series is None:  # ``labels()`` is ~2 µs: once per model, not per stream
            series = self._gap_series[model] = self.inter_token_latency.labels(model)
        return GapTally(series)

    def _finished_series(self, model: str, adapter: str, endpoint: str, stream: bool, status: int) -> _Series:
        """The series one finished request moves, looked up once per label set: ``labels()``
        costs ~2 µs each, seven per request."""
        return (
            self.requests.labels(model, adapter, endpoint, str(stream).lower(), str(status)),
            self.request_duration.labels(model, endpoint),
            self.time_to_first_token.labels(model),
            self.prompt_tokens_per_request.labels(model),
            self.completion_tokens_per_request.labels(model),
            self.prompt_tokens.labels(model, adapter),
            self.completion_tokens.labels(model, adapter),
        )
