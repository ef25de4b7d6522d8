"""``POST /tokenize`` and ``POST /detokenize``, vLLM's endpoints, at the root as vLLM serves them."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.http.deps import ComponentsDep
from gateway.http.json_response import JSONBytesResponse
from gateway.http.routes import log_unknown_fields
from gateway.openai.tokenize_encode import detokenize_object, tokenize_object
from gateway.plan.tokenize import detokenize, tokenize
from gateway.plan.tokenize_request import DetokenizeRequest, TokenizeRequest

router = APIRouter()


@router.post("/tokenize")
async def create_tokenize(body: TokenizeRequest, components: ComponentsDep) -> JSONBytesResponse:
    log_unknown_fields(body)
    result = await tokenize(body, components.catalog, components.settings)
    return JSONBytesResponse(tokenize_object(result))


@router.post("/detokenize")
async def create_detokenize(body: DetokenizeRequest, components: ComponentsDep) -> JSONBytesResponse:
    log_unknown_fields(body)
    text = await detokenize(body, components.catalog, components.settings)
    return JSONBytesResponse(detokenize_object(text))
