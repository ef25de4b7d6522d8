"""Anthropic's Messages API: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Errors on these paths have Anthropic's shape (``http.errors``); the ``anthropic-version`` header
is accepted and ignored."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.anthropic.encode import count_object
from gateway.http.answer import respond
from gateway.http.deps import ComponentsDep, request_context
from gateway.http.json_response import JSONBytesResponse
from gateway.http.messages_answer import MessagesAnswer
from gateway.http.routes import log_unknown_fields
from gateway.plan.messages import count_message_tokens, prepare_message
from gateway.plan.messages_request import MessagesCountRequest, MessagesRequest

router = APIRouter()


@router.post("/v1/messages", response_model=None)
async def create_message(body: MessagesRequest, request: Request, components: ComponentsDep) -> Response:
    log_unknown_fields(body)
    context = request_context(request, components.settings)
    plan = await prepare_message(body, context, components.catalog, components.settings, components.seal)
    answer = MessagesAnswer(plan, components.seal)
    return await respond(request, components.service, plan.generation, components.settings, answer)


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: MessagesCountRequest, request: Request, components: ComponentsDep) -> JSONBytesResponse:
    log_unknown_fields(body)
    count = await count_message_tokens(body, components.catalog, components.settings, components.seal)
    return JSONBytesResponse(count_object(count))
