"""POST /v1/chat/completions."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.answer import respond
from gateway.http.deps import ComponentsDep, request_context
from gateway.http.routes import log_unknown_fields
from gateway.plan.prepare import prepare_chat
from gateway.plan.requests import ChatCompletionRequest

router = APIRouter()


@router.post("/v1/chat/completions", response_model=None)
async def create_chat_completion(
    body: ChatCompletionRequest,
    request: Request,
    components: ComponentsDep,
) -> Response:
    log_unknown_fields(body)
    context = request_context(request, components.settings)
    plan = await prepare_chat(body, context, components.catalog, components.settings, components.images)
    return await respond(request, components.service, plan, components.settings)
