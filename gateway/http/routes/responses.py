"""The Responses API: ``POST /v1/responses``, the stored responses by id (retrieve, delete,
list input items; a background response's events streamed again, its cancel), each visible only
to the API key that created it, and the count of a request's input tokens."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import InvalidRequestError, ResponseNotFoundError
from gateway.http.answer import respond
from gateway.http.background_answer import (
    cancel_background,
    forget_background,
    settled,
    start_background,
    stream_background,
)
from gateway.http.deps import ComponentsDep, request_context
from gateway.http.json_response import JSONBytesResponse
from gateway.http.responses_answer import ResponsesAnswer
from gateway.http.routes import log_unknown_fields, page_limit, page_order
from gateway.http.security import request_owner
from gateway.openai.responses_encode import deleted_object, input_item_list
from gateway.openai.tokenize_encode import input_tokens_object
from gateway.plan.responses import count_input_tokens, prepare_response
from gateway.plan.responses_request import InputTokensRequest, ResponsesRequest
from gateway.store.base import ResponseStore, StoredResponse

router = APIRouter()

IGNORED_TOOLS_HEADER = "x-gateway-ignored-tools"
"""Names the built-in tools (``web_search``...) a response was planned without."""


@router.post("/v1/responses", response_model=None)
async def create_response(body: ResponsesRequest, request: Request, components: ComponentsDep) -> Response:
    log_unknown_fields(body)
    context = request_context(request, components.settings)
    owner = request_owner(request.scope)
    plan = await prepare_response(
        body,
        context,
        components.catalog,
        components.settings,
        components.store,
        owner,
        components.images,
        components.seal,
    )
    if plan.background:
        response = await start_background(request, components, plan, stream=body.stream)
    else:
        answer = ResponsesAnswer(plan, components.store, components.seal)
        response = await respond(request, components.service, plan.generation, components.settings, answer)
    if plan.tools.ignored:  # built-in tools the model was not offered: said where a client can see it
        response.headers[IGNORED_TOOLS_HEADER] = ",".join(plan.tools.ignored)
    return response


@router.post("/v1/responses/input_tokens")
async def count_response_input_tokens(
    body: InputTokensRequest, request: Request, components: ComponentsDep
) -> JSONBytesResponse:
    log_unknown_fields(body)
    owner = request_owner(request.scope)
    count = await count_input_tokens(
        body, components.catalog, components.settings, components.store, owner, components.seal
    )
    return JSONBytesResponse(input_tokens_object(count))


@router.get("/v1/responses/{response_id}", response_model=None)
async def retrieve_response(response_id: str, request: Request, components: ComponentsDep) -> Response:
    """The stored object; with ``stream=true``, a background response's events after
    ``starting_after`` (all of them without it), then the live ones."""
    query = request.query_params
    stream = query.get("stream", "false").lower()
    if stream not in ("true", "false"):
        raise InvalidRequestError(f"stream must be true or false, got {query.get('stream')!r}", param="stream")
    after = query.get("starting_after")
    if after is not None and not (after.isascii() and after.isdigit()):
        raise InvalidRequestError(
            f"starting_after must be a non-negative integer, got {after!r}", param="starting_after"
        )
    stored = await settled(components, await find_response(components.store, response_id, request_owner(request.scope)))
    if stream == "true":
        return stream_background(components, stored, -1 if after is None else int(after))
    return JSONBytesResponse(stored.response)


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request, components: ComponentsDep) -> JSONBytesResponse:
    stored = await find_response(components.store, response_id, request_owner(request.scope))
    return JSONBytesResponse(await cancel_background(components, stored))


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request, components: ComponentsDep) -> JSONBytesResponse:
    store, owner = components.store, request_owner(request.scope)
    if store is None or not await store.delete(response_id, owner):
        raise not_found(response_id, store)
    forget_background(components, response_id, owner)
    return JSONBytesResponse(deleted_object(response_id))


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(response_id: str, request: Request, components: ComponentsDep) -> JSONBytesResponse:
    limit, order = page_limit(request), page_order(request)
    stored = await find_response(components.store, response_id, request_owner(request.scope))
    page = input_item_list(stored.input_items, after=request.query_params.get("after"), limit=limit, order=order)
    return JSONBytesResponse(page)


async def find_response(store: ResponseStore | None, response_id: str, owner: str) -> StoredResponse:
    stored = await store.get(response_id, owner) if store is not None else None
    if stored is None:
        raise not_found(response_id, store)
    return stored


def not_found(response_id: str, store: ResponseStore | None) -> ResponseNotFoundError:
    off = " (storing responses is turned off on this gateway)" if store is None else ""
    return ResponseNotFoundError(f"Response with id '{response_id}' not found{off}.", param="response_id")
