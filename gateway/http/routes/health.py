"""Liveness (process up) and readiness (Triton reachable and at least one model ready).

Both answer without a key on a gateway with keys (Kubernetes' probes send none), and then say no
more than the status: readiness names the models, and Triton's own error, only to a request that
may see models (``keys.context.models_visible``), and names only the models its key may use.
"""

from __future__ import annotations

from fastapi import APIRouter

from gateway.errors import BackendUnavailableError, GatewayError, ShuttingDownError
from gateway.http.deps import BackendDep, CatalogDep, ServiceDep
from gateway.http.json_response import JSONBytesResponse
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
async def ready(service: ServiceDep, backend: BackendDep, catalog: CatalogDep) -> JSONBytesResponse:
    if service.draining:
        raise ShuttingDownError("The gateway is shutting down.", headers={"Retry-After": "1"})
    if not await backend.server_ready():
        raise BackendUnavailableError("Triton is not reachable or not ready", headers={"Retry-After": "1"})
    try:
        await catalog.refresh()
    except GatewayError as exc:
        detail = f": {exc.message}" if models_visible() else ""
        raise BackendUnavailableError(f"cannot list Triton's models{detail}") from exc
    models = await catalog.models()
    if not models:
        raise BackendUnavailableError("Triton has no ready model", headers={"Retry-After": "1"})
    if not models_visible():
        return JSONBytesResponse({"status": "ready"})
    return JSONBytesResponse({"status": "ready", "models": sorted(visible_models(models))})
