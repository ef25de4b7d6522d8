"""Liveness (process up) and readiness (Triton reachable and at least one model ready)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request

from gateway.errors import BackendUnavailableError, GatewayError, ShuttingDownError
from gateway.http.routes.common import JSONBytesResponse, service_of

router = APIRouter()


@router.get("/health")
async def health() -> JSONBytesResponse:
    return JSONBytesResponse({"status": "ok"})


@router.get("/health/ready")
async def ready(request: Request) -> JSONBytesResponse:
    service = service_of(request)
    if service.draining:
        raise ShuttingDownError("The gateway is shutting down.", headers={"Retry-After": "1"})
    if not await service.backend.server_ready():
        raise BackendUnavailableError("Triton is not reachable or not ready", headers={"Retry-After": "1"})
    try:
        await service.catalog.refresh()
    except GatewayError as exc:
        raise BackendUnavailableError(f"cannot list Triton's models: {exc.message}") from exc
    models = await service.catalog.models()
    if not models:
        raise BackendUnavailableError("Triton has no ready model", headers={"Retry-After": "1"})
    return JSONBytesResponse({"status": "ready", "models": sorted(models)})
