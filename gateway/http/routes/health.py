"""Liveness (process up) and readiness (Triton reachable and at least one model ready).

The readiness check itself, and the gauge that shows its verdict, are ``http.readiness``'s.
Both answer without a key on a gateway with keys (Kubernetes' probes send none), and then say no
more than the status: readiness names the models, and Triton's own error, only to a request that
may see models (``keys.context.models_visible``), and names only the models its key may use.
"""

from __future__ import annotations

from fastapi import APIRouter

from gateway.http.deps import ComponentsDep
from gateway.http.json_response import JSONBytesResponse
from gateway.http.readiness import check_ready
from gateway.keys.context import models_visible
from gateway.models.resolve import visible_models

router = APIRouter()


@router.get("/health")
async def health() -> JSONBytesResponse:
    return JSONBytesResponse({"status": "ok"})


@router.get("/health/live")
async def live() -> JSONBytesResponse:
    """Kubernetes' name for ``/health``: the process answers."""
    return JSONBytesResponse({"status": "ok"})


@router.get("/health/ready")
async def ready(components: ComponentsDep) -> JSONBytesResponse:
    models = await check_ready(components)
    if not models_visible():
        return JSONBytesResponse({"status": "ready"})
    return JSONBytesResponse({"status": "ready", "models": sorted(visible_models(models))})
