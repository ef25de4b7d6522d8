"""Helpers shared by route handlers: the service, the request id, JSON bodies, disconnects."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.service import CompletionService

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
