"""Liveness (process up) and readiness (Triton reachable and at least one model ready)."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.errors import BackendUnavailableError, GatewayError, ShuttingDownError
from gateway.http.deps import BackendDep, CatalogDep, ServiceDep
from gateway.http.json_response import JSONBytesResponse

router = APIRouter()


@router.get("/health")
async def health() -> JSONBytesResponse:
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
        raise BackendUnavailableError(f"cannot list Triton's models: {exc.message}") from exc
    models = await catalog.models()
    if not models:
        raise BackendUnavailableError("Triton has no ready model", headers={"Retry-After": "1"})
    return JSONBytesResponse({"status": "ready", "models": sorted(models)})
