"""The request id: accepted from ``X-Request-Id`` (or made), echoed, and carried to Triton and logs."""

from __future__ import annotations

import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.http.sse import BODY_SEND
from gateway.logs import request_id_var

_REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


class RequestIdMiddleware:
    """Accept ``X-Request-Id`` (or make one), keep it in ``scope["state"]`` for the Triton request
    id and logs, and echo it on the response. Pure ASGI: no per-request task or body buffering.

    Unless the app left the server's own ``send`` in ``scope["state"]["body_send"]`` (``app.GatewayApp``
    does), it leaves the ``send`` it was given there: once a stream's headers are out, the wrappers
    between there and the route (this one, and Starlette's exception handlers, which only watch
    for the response start) pass body messages through untouched, so ``sse.SSEResponse`` writes
    its frames there directly, three calls fewer per token."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = ""
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                incoming = value.decode("latin-1")
                break
        request_id = incoming if _REQUEST_ID_OK.match(incoming) else uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        state.setdefault(BODY_SEND, send)
        request_id_var.set(request_id)
        header = (b"x-request-id", request_id.encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        await self.app(scope, receive, send_with_id)


def request_id_of(scope: Scope) -> str:
    return scope.get("state", {}).get("request_id") or "unknown"
