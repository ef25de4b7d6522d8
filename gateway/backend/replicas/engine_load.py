"""How busy each replica's engine is, read from its Triton metrics port, and the router's score.

The gateway counts its own requests on each replica exactly and at once, but it sees nothing of
the other gateway pods (or workers, or clients that call Triton directly) sharing the same
replicas, nor whether the engine is queueing. Triton's ``/metrics`` sees every client: the pool
reads it every ``engine_load_interval`` seconds (``EngineLoadReader``), keeps the last answer
per replica, and the router scores replicas by ``replica_load``, which joins both views.

What is read, per model (label ``model`` as Triton and the backends' custom metrics label it;
``model_name`` as vLLM's own server does), several versions of a model summed:

- ``nv_inference_pending_request_count``: Triton's own gauge of the model's requests still in
  Triton's scheduler queue (not yet handed to the model) -> waiting.
- vLLM's gauge names (vLLM's server; the reference model ``tiny-llm`` exports the same names as
  Triton custom metrics): ``vllm:num_requests_running`` -> running, ``vllm:num_requests_waiting``
  (queued inside the engine; added to Triton's queue) -> waiting, ``vllm:kv_cache_usage_perc``
  (``vllm:gpu_cache_usage_perc`` in older vLLM releases) -> the KV cache in use, 0..1.
- The TensorRT-LLM backend's gauges, as its Triton metrics section documents them
  (docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/tensorrtllm_backend/README.html#triton-metrics,
  from ``inflight_batcher_llm/src/custom_metrics_reporter`` in triton-inference-server/tensorrtllm_backend):
  ``nv_trt_llm_request_metrics{request_type=...}`` with ``active`` (the requests the executor
  holds) -> running and ``waiting`` (queued in the executor; ``queued`` taken as the same) ->
  waiting (the other types, ``context``, ``scheduled`` and ``max``, are parts of ``active`` or a
  capacity); ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=...}`` with ``fraction``
  where the backend reports it, else ``used`` / ``max`` blocks -> the KV cache in use.

A model none of these name has no entry. Values that are not finite are skipped, negative ones
read as 0 and a cache fraction is capped at 1, so the score never turns NaN or negative.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EngineLoad:
    running: float
    """Requests the engine is running now (all clients', not just this gateway's)."""
    waiting: float
    """Requests queued in Triton or inside the engine."""
    kv_usage: float | None
    """Fraction 0..1 of the KV cache in use, where the backend reports it."""


_PENDING = "nv_inference_pending_request_count"
_VLLM_RUNNING = "vllm:num_requests_running"
_VLLM_WAITING = "vllm:num_requests_waiting"
_VLLM_KV = frozenset({"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"})
_TRT_REQUESTS = "nv_trt_llm_request_metrics"
_TRT_BLOCKS = "nv_trt_llm_kv_cache_block_metrics"
_TYPE_LABEL = {_TRT_REQUESTS: "request_type", _TRT_BLOCKS: "kv_cache_block_type"}
_NAMES = (_PENDING, _VLLM_RUNNING, _VLLM_WAITING, *sorted(_VLLM_KV), _TRT_REQUESTS, _TRT_BLOCKS)
"""The samples read, by name: only their lines are parsed. Triton's answer is mostly histogram
buckets and counters this reads nothing of (a thousand lines took the parser 11 ms of the event
loop; the few that matter take a fraction of one)."""


def parse_engine_load(text: str) -> dict[str, EngineLoad]:
    """Per model name, its engine's load in one ``/metrics`` answer (the Prometheus text format).
    Raises ``ValueError`` for text that is not that format."""
    running: dict[str, float] = {}
    waiting: dict[str, float] = {}
    kv: dict[str, float] = {}
    # TensorRT-LLM's gauges come as one family per kind, one sample per type: gathered per
    # (family, model, version) first, since a fraction needs two samples of one version.
    typed: dict[tuple[str, str, str], dict[str, float]] = {}
    wanted = [line for line in text.splitlines() if line.startswith(_NAMES)]
    if not wanted:  # nothing read here: still an error unless it is metrics text
        for _ in text_string_to_metric_families(text):
            pass
        return {}
    for family in text_string_to_metric_families("\n".join(wanted) + "\n"):
        for sample in family.samples:
            name = sample.name
            labels = sample.labels
            model = labels.get("model") or labels.get("model_name")
            value = float(sample.value)
            if not model or not math.isfinite(value):
                continue
            value = max(0.0, value)
            if name == _PENDING or name == _VLLM_WAITING:
                waiting[model] = waiting.get(model, 0.0) + value
            elif name == _VLLM_RUNNING:
                running[model] = running.get(model, 0.0) + value
            elif name in _VLLM_KV:
                kv[model] = max(kv.get(model, 0.0), min(1.0, value))
            elif name in _TYPE_LABEL:
                kind = labels.get(_TYPE_LABEL[name], "")
                typed.setdefault((name, model, labels.get("version", "")), {})[kind] = value
    for (name, model, _), values in typed.items():
        if name == _TRT_REQUESTS:
            running[model] = running.get(model, 0.0) + values.get("active", 0.0)
            waiting[model] = waiting.get(model, 0.0) + values.get("waiting", values.get("queued", 0.0))
            continue
        fraction = values.get("fraction")
        if fraction is None and values.get("max", 0.0) > 0.0:
            fraction = values.get("used", 0.0) / values["max"]
        if fraction is not None:
            kv[model] = max(kv.get(model, 0.0), min(1.0, fraction))
    return {
        model: EngineLoad(running.get(model, 0.0), waiting.get(model, 0.0), kv.get(model))
        for model in {*running, *waiting, *kv}
    }


def total_load(loads: Mapping[str, EngineLoad]) -> EngineLoad:
    """A replica's load over all its models: one engine process (or GPU) serves them all, so
    requests add up; the cache is each model's own, so the fullest one stands for the replica."""
    known = [load.kv_usage for load in loads.values() if load.kv_usage is not None]
    return EngineLoad(
        sum(load.running for load in loads.values()),
        sum(load.waiting for load in loads.values()),
        max(known) if known else None,
    )


class EngineLoadReader:
    """Reads replicas' ``/metrics``: one HTTP client for all of them, so each read reuses a kept
    connection instead of opening one per replica per interval."""

    def __init__(self, timeout: float) -> None:
        self._client = httpx.AsyncClient(timeout=timeout, trust_env=False, follow_redirects=False)

    async def read(self, url: str) -> dict[str, EngineLoad] | None:
        """The engine load per model at ``url``; None when it did not answer (refused, timed
        out, a status other than 200) or answered with something that is not metrics text. The
        pool reads every replica every interval, so a failure is an answer, never an error."""
        try:
            response = await self._client.get(url)
        except httpx.HTTPError as exc:
            logger.debug("engine metrics at %s: no answer (%s)", url, type(exc).__name__)
            return None
        if response.status_code != 200:
            logger.debug("engine metrics at %s: status %d", url, response.status_code)
            return None
        try:
            return parse_engine_load(response.text)
        except ValueError:
            logger.debug("engine metrics at %s: not metrics text", url)
            return None

    async def aclose(self) -> None:
        await self._client.aclose()


def replica_load(in_flight: int, engine: EngineLoad | None, trusted: bool) -> float:
    """The router's score of a replica, in requests: lower takes the next one.

    - ``in_flight`` (this gateway's own requests there) is exact and instant but blind to other
      gateway pods; the engine's ``running + waiting`` counts every client but is up to one read
      interval old. The larger of the two is the better guess of both: right after a placement
      the engine has not seen it yet, and another pod's traffic never shows in ``in_flight``.
    - Plus ``waiting`` again: a queue means the engine is saturated, so a request placed there
      waits behind the queue instead of joining the batch; each queued request weighs double.
    - Times ``1 + kv_usage`` where the cache use is known: a fuller cache admits fewer new
      sequences and evicts cached prefixes sooner, so the same count costs more there.
    - No engine load (metrics off, or not read yet) and trusted: ``in_flight`` alone, exactly
      the routing without metrics.
    - Not trusted (its metrics stopped answering, so its last numbers may be stale and the
      replica may be in trouble): ``2 x score + 1``, so it takes work only when the others are
      clearly busier, and still some when they are (it is not ejected; the pool's probes decide
      that).

    Pure and cheap: the router calls it several times per request.
    """
    if engine is None:
        load = float(in_flight)
    else:
        waiting = engine.waiting
        load = max(float(in_flight), engine.running + waiting) + waiting
        if engine.kv_usage is not None:
            load *= 1.0 + engine.kv_usage
    return load if trusted else 2.0 * load + 1.0
