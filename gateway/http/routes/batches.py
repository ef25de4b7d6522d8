"""The Batch API: create, retrieve, list and cancel batches; each visible only to its API key."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request

from gateway.errors import InvalidRequestError
from gateway.http.deps import Components, ComponentsDep
from gateway.http.json_response import JSONBytesResponse
from gateway.http.routes import page_limit
from gateway.http.security import request_owner
from gateway.jobs.service import JobService, NewBatch
from gateway.openai.batches_encode import batch_object, object_list
from gateway.plan.batches import BatchCreateRequest, check_batch, expiry_seconds

router = APIRouter()


def jobs_of(components: Components) -> JobService:
    if components.jobs is None:
        raise InvalidRequestError(
            "The Batch API keeps its files and batches in the responses store, which is turned off on this "
            "gateway (responses_store_enabled).",
            code="batches_disabled",
        )
    return components.jobs


@router.post("/v1/batches")
async def create_batch(body: BatchCreateRequest, request: Request, components: ComponentsDep) -> JSONBytesResponse:
    jobs = jobs_of(components)
    window = check_batch(body)
    expiry = body.output_expires_after
    new = NewBatch(
        body.input_file_id,
        body.endpoint,
        body.completion_window,
        window,
        body.metadata,
        body.max_concurrency,
        None if expiry is None else expiry_seconds(expiry, "output_expires_after"),
    )
    return JSONBytesResponse(batch_object(await jobs.create(request_owner(request.scope), new)))


@router.get("/v1/batches")
async def list_batches(request: Request, components: ComponentsDep) -> JSONBytesResponse:
    after, limit = request.query_params.get("after"), page_limit(request)
    records, more = await jobs_of(components).batches(request_owner(request.scope), after=after, limit=limit)
    return JSONBytesResponse(object_list([batch_object(r) for r in records], more))


@router.get("/v1/batches/{batch_id}")
async def retrieve_batch(batch_id: str, request: Request, components: ComponentsDep) -> JSONBytesResponse:
    return JSONBytesResponse(batch_object(await jobs_of(components).batch(batch_id, request_owner(request.scope))))


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, request: Request, components: ComponentsDep) -> JSONBytesResponse:
    return JSONBytesResponse(batch_object(await jobs_of(components).cancel(batch_id, request_owner(request.scope))))
