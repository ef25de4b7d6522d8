"""POST /v1/completions (the legacy text completions API)."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.routes.common import context_of, respond, service_of
from gateway.openai.schemas import CompletionRequest
from gateway.plan.prepare import prepare_completion

logger = logging.getLogger(__name__)
router = APIRouter()


@router.post("/v1/completions", response_model=None)
async def create_completion(body: CompletionRequest, request: Request) -> Response:
    if body.model_extra and logger.isEnabledFor(logging.DEBUG):
        logger.debug("ignoring unknown fields: %s", sorted(body.model_extra))
    service = service_of(request)
    prepared = await prepare_completion(body, context_of(request, service), service.catalog, service.settings)
    return await respond(request, service, prepared, body.stream)
