"""Readiness: the check ``/health/ready`` answers with, and the ``gateway_ready`` gauge that tells
Prometheus the same verdict.

A probe's answer reaches only the kubelet; an alert on "this pod has not been ready for five
minutes" needs it in the scrape. Every check's verdict is kept in the gauge, and when no check has
run for ``ready_check_interval`` seconds the lifespan runs one, so the gauge is true on a gateway
that nothing probes (run by hand, or behind a load balancer that only probes ``/health``). Where
Kubernetes probes at least that often, the gateway adds no check of its own: each one asks every
replica and lists the models again.
"""

from __future__ import annotations

import asyncio
import logging
import time

from gateway.errors import BackendUnavailableError, GatewayError, ShuttingDownError
from gateway.http.deps import Components
from gateway.keys.context import models_visible
from gateway.models.catalog import ServedModel

logger = logging.getLogger(__name__)


async def check_ready(components: Components) -> dict[str, ServedModel]:
    """The ready models, or the typed error the route answers with (draining, Triton unreachable
    or not ready, no ready model); either way the verdict goes to ``gateway_ready``."""
    try:
        models = await _ready_models(components)
    except GatewayError:
        components.metrics.ready(False)
        raise
    components.metrics.ready(True)
    return models


async def _ready_models(components: Components) -> dict[str, ServedModel]:
    if components.service.draining:
        raise ShuttingDownError("The gateway is shutting down.", headers={"Retry-After": "1"})
    if not await components.backend.server_ready():
        raise BackendUnavailableError("Triton is not reachable or not ready", headers={"Retry-After": "1"})
    catalog = components.catalog
    try:
        await catalog.refresh()
    except GatewayError as exc:
        detail = f": {exc.message}" if models_visible() else ""
        raise BackendUnavailableError(f"cannot list Triton's models{detail}") from exc
    models = await catalog.models()
    if not models:
        raise BackendUnavailableError("Triton has no ready model", headers={"Retry-After": "1"})
    return models


async def watch_ready(components: Components, interval: float) -> None:
    """Until cancelled, a check whenever none ran for ``interval`` seconds (0: never). A failure
    is the gauge's 0, not a log line: the probes' answers and the replica pool already say why."""
    if interval <= 0:
        return
    metrics = components.metrics
    while True:
        idle = time.monotonic() - metrics.ready_at
        if idle >= interval:
            try:
                await check_ready(components)
            except GatewayError:
                pass
            except Exception:  # an unexpected failure must not end the watch and freeze the gauge
                metrics.ready(False)
                logger.exception("readiness check failed")
            idle = 0.0
        await asyncio.sleep(interval - idle)
