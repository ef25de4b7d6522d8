"""POST /v1/chat/completions."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.routes.common import context_of, respond, service_of
from gateway.openai.schemas import ChatCompletionRequest
from gateway.plan.prepare import prepare_chat

logger = logging.getLogger(__name__)
router = APIRouter()


@router.post("/v1/chat/completions", response_model=None)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    if body.model_extra and logger.isEnabledFor(logging.DEBUG):
        logger.debug("ignoring unknown fields: %s", sorted(body.model_extra))
    service = service_of(request)
    prepared = await prepare_chat(body, context_of(request, service), service.catalog, service.settings)
    return await respond(request, service, prepared, body.stream)
