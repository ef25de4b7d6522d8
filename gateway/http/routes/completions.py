"""POST /v1/completions (the legacy text completions API)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.deps import CatalogDep, ContextDep, ServiceDep, SettingsDep
from gateway.http.respond import respond
from gateway.http.routes import log_unknown_fields
from gateway.openai.schemas import CompletionRequest
from gateway.plan.prepare import prepare_completion

router = APIRouter()


@router.post("/v1/completions", response_model=None)
async def create_completion(
    body: CompletionRequest,
    request: Request,
    context: ContextDep,
    settings: SettingsDep,
    catalog: CatalogDep,
    service: ServiceDep,
) -> Response:
    log_unknown_fields(body)
    plan = await prepare_completion(body, context, catalog, settings)
    return await respond(request, service, plan, settings)
