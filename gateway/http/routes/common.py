"""Helpers shared by route handlers: the service, the request id, JSON bodies, disconnects."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.service import CompletionService
from gateway.errors import InvalidRequestError
from gateway.http.sse import prime, sse_response
from gateway.plan.prepare import GenerationPlan, RequestContext

T = TypeVar("T")


class JSONBytesResponse(Response):
    """JSON encoded with orjson (faster than the stdlib, and it emits UTF-8 as is)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def service_of(request: Request) -> CompletionService:
    return request.app.state.service  # type: ignore[no-any-return]


def request_id_of(request: Request) -> str:
    return request.scope.get("state", {}).get("request_id") or "unknown"


TIMEOUT_HEADER = "x-request-timeout"


def context_of(request: Request, service: CompletionService) -> RequestContext:
    """The request id and the deadline: the configured ``request_timeout``, lowered (never
    raised) by an ``X-Request-Timeout: <seconds>`` header."""
    timeout = service.settings.request_timeout
    header = request.headers.get(TIMEOUT_HEADER)
    if header is not None:
        try:
            asked = float(header)
        except ValueError:
            asked = -1.0
        if not asked > 0:
            raise InvalidRequestError(f"{TIMEOUT_HEADER} must be a positive number of seconds, got {header!r}")
        timeout = asked if timeout is None else min(timeout, asked)
    deadline = None if timeout is None else time.monotonic() + timeout
    return RequestContext(request_id_of(request), deadline)


async def respond(request: Request, service: CompletionService, prepared: GenerationPlan, stream: bool) -> Response:
    """Admit → stream (SSE) or complete (JSON); the client leaving cancels every phase."""
    record = service.record(prepared)
    ticket = service.try_admit(prepared) or await until_disconnect(request, service.admit(prepared, record))
    try:
        if stream:
            wait = service.settings.first_response_wait
            frames = await until_disconnect(request, prime(service.stream(prepared, ticket, record), wait))
            return sse_response(frames, ping_interval=service.settings.sse_ping_interval)
        return JSONBytesResponse(await until_disconnect(request, service.complete(prepared, ticket, record)))
    except BaseException:
        ticket.release()  # idempotent: the generation released it already if it ever ran
        raise


class ClientDisconnected(Exception):
    """The HTTP client went away before a non-streaming answer was ready."""


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run ``work`` but cancel it as soon as the client disconnects.

    A non-streaming request otherwise keeps Triton busy for a client that is gone: nothing is
    written to the socket until the end, so nobody would notice.
    """
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=5.0)  # let the backend call's cancel run now
    if task.cancelled():
        raise ClientDisconnected()
    return task.result()
