"""POST /v1/completions (the legacy text completions API)."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.routes.common import JSONBytesResponse, request_id_of, service_of, until_disconnect
from gateway.schemas import CompletionRequest
from gateway.sse import prime, sse_response

logger = logging.getLogger(__name__)
router = APIRouter()


@router.post("/v1/completions", response_model=None)
async def create_completion(body: CompletionRequest, request: Request) -> Response:
    if body.model_extra and logger.isEnabledFor(logging.DEBUG):
        logger.debug("ignoring unknown fields: %s", sorted(body.model_extra))
    service = service_of(request)
    prepared = await service.prepare_completion(body, request_id_of(request))
    if body.stream:
        frames = await prime(service.stream(prepared), service.settings.first_response_wait)
        return sse_response(frames, ping_interval=service.settings.sse_ping_interval)
    return JSONBytesResponse(await until_disconnect(request, service.complete(prepared)))
