"""GET /metrics: Prometheus text format, on the gateway's port or on its own (``metrics_port``:
``http.metrics_listener``)."""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from gateway.http.deps import MetricsDep
from gateway.metrics import Metrics

router = APIRouter()


def metrics_page(metrics: Metrics) -> Response:
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/metrics", include_in_schema=False)
async def metrics(metrics: MetricsDep) -> Response:
    return metrics_page(metrics)
