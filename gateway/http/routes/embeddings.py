"""POST /v1/embeddings."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.embed import run_embeddings
from gateway.http.deps import ComponentsDep, request_context
from gateway.http.disconnect import ClientWatch
from gateway.http.errors import ClientDisconnected
from gateway.http.rejections import mark_counted_by_outcome
from gateway.http.routes import log_unknown_fields
from gateway.openai.embeddings import encode_embeddings
from gateway.plan.embeddings import EmbeddingCreateRequest, prepare_embeddings

router = APIRouter()


@router.post("/v1/embeddings", response_model=None)
async def create_embeddings(body: EmbeddingCreateRequest, request: Request, components: ComponentsDep) -> Response:
    log_unknown_fields(body)
    context = request_context(request, components.settings)
    plan = await prepare_embeddings(
        body, context.request_id, context.deadline, components.catalog, components.settings, priority=context.priority
    )
    mark_counted_by_outcome(request.scope)  # from here on, run_embeddings counts the request
    watch = ClientWatch(request.receive)  # a client that leaves cancels the calls still running
    try:
        result = await run_embeddings(components.service, plan)
    except asyncio.CancelledError:
        if watch.taken_back():
            raise ClientDisconnected() from None
        raise
    finally:
        watch.stop()
    return Response(encode_embeddings(plan, result), media_type="application/json")
