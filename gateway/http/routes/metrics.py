"""GET /metrics: Prometheus text format."""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.routes.common import service_of

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    return Response(generate_latest(service_of(request).metrics.registry), media_type=CONTENT_TYPE_LATEST)
