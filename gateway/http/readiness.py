"""Readiness: the check ``/health/ready`` answers with, and the ``gateway_ready`` gauge that tells
Prometheus the same verdict.

A probe's answer reaches only the kubelet; an alert on "this pod has not been ready for five
minutes" needs it in the scrape. Every check's verdict is kept in the gauge, and the lifespan runs
the check every ``READY_CHECK_INTERVAL`` seconds as well, so the gauge is true on a gateway that
nothing probes (run by hand, or behind a load balancer that only probes ``/health``).
"""

from __future__ import annotations

import asyncio
import logging

from gateway.errors import BackendUnavailableError, GatewayError, ShuttingDownError
from gateway.http.deps import Components
from gateway.keys.context import models_visible
from gateway.models.catalog import ServedModel

logger = logging.getLogger(__name__)

READY_CHECK_INTERVAL = 10.0
"""Seconds between the lifespan's own checks: the gauge is at most this old plus a scrape
interval, and Triton gets one ``ServerReady`` and one model list per interval per worker."""


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


async def watch_ready(components: Components, interval: float = READY_CHECK_INTERVAL) -> None:
    """Check every ``interval`` seconds until cancelled. A failure is the gauge's 0, not a log
    line: the probes' own answers and the replica pool already say why."""
    while True:
        try:
            await check_ready(components)
        except GatewayError:
            pass
        except Exception:  # an unexpected failure must not end the watch and freeze the gauge
            components.metrics.ready(False)
            logger.exception("readiness check failed")
        await asyncio.sleep(interval)
