"""The Files API, for the Batch API's files: upload (multipart, OpenAI's fields), retrieve, list,
content, delete; each file visible only to the API key that uploaded it."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import InvalidRequestError, PayloadTooLargeError
from gateway.http.deps import ComponentsDep
from gateway.http.json_response import JSONBytesResponse
from gateway.http.routes import page_limit, page_order
from gateway.http.routes.batches import jobs_of
from gateway.http.security import request_owner
from gateway.openai.batches_encode import file_deleted, file_object, object_list
from gateway.plan.batches import check_purpose, upload_expiry

router = APIRouter()


@router.post("/v1/files")
async def upload_file(request: Request, components: ComponentsDep) -> JSONBytesResponse:
    jobs = jobs_of(components)
    cap = components.settings.batch_max_file_bytes
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidRequestError("The upload must be multipart/form-data with a file part.", param="file")
    try:
        form = await request.form(max_files=1, max_fields=8, max_part_size=64 * 1024)
    except PayloadTooLargeError:  # the body limit, counted as the form is read
        raise
    except Exception as exc:  # malformed multipart: python-multipart's or Starlette's words
        raise InvalidRequestError(f"The upload could not be read as multipart/form-data: {exc}", param="file") from None
    try:
        check_purpose(_text(form.get("purpose")))
        expiry = upload_expiry(_text(form.get("expires_after[anchor]")), _text(form.get("expires_after[seconds]")))
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidRequestError("The upload has no file part named 'file'.", param="file")
        content = await upload.read(cap + 1)
        if len(content) > cap:
            raise PayloadTooLargeError(f"The file is larger than the {cap} bytes this gateway takes for a batch.")
        record = await jobs.upload(request_owner(request.scope), upload.filename or "upload.jsonl", content, expiry)
    finally:
        await form.close()
    return JSONBytesResponse(file_object(record))


@router.get("/v1/files")
async def list_files(request: Request, components: ComponentsDep) -> JSONBytesResponse:
    query = request.query_params
    limit, order = page_limit(request, default=10000, most=10000), page_order(request)
    records, more = await jobs_of(components).files(
        request_owner(request.scope), purpose=query.get("purpose"), after=query.get("after"), limit=limit, order=order
    )
    return JSONBytesResponse(object_list([file_object(r) for r in records], more))


@router.get("/v1/files/{file_id}")
async def retrieve_file(file_id: str, request: Request, components: ComponentsDep) -> JSONBytesResponse:
    return JSONBytesResponse(file_object(await jobs_of(components).file(file_id, request_owner(request.scope))))


@router.get("/v1/files/{file_id}/content")
async def file_content(file_id: str, request: Request, components: ComponentsDep) -> Response:
    content = await jobs_of(components).content(file_id, request_owner(request.scope))
    return Response(content.encode(), media_type="application/jsonl")


@router.delete("/v1/files/{file_id}")
async def delete_file(file_id: str, request: Request, components: ComponentsDep) -> JSONBytesResponse:
    await jobs_of(components).delete_file(file_id, request_owner(request.scope))
    return JSONBytesResponse(file_deleted(file_id))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
