"""The request id: accepted from ``X-Request-Id`` (or made), echoed, and carried to Triton and logs."""

from __future__ import annotations

import os
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.logs import request_id_var

_REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


class RequestIdMiddleware:
    """Accept ``X-Request-Id`` (or make one), keep it in ``scope["state"]`` for the Triton request
    id and logs, and echo it on the response. Pure ASGI: no per-request task or body buffering."""

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
        # 32 random hex digits, as ``uuid4().hex`` gave but for its version digits: ``uuid4`` builds a
        # ``UUID`` in Python (~2.5 µs, two per request on the path to Triton; this is ~0.5).
        request_id = incoming if _REQUEST_ID_OK.match(incoming) else os.urandom(16).hex()
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        request_id_var.set(request_id)
        header = (b"x-request-id", request_id.encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        await self.app(scope, receive, send_with_id)


def request_id_of(scope: Scope) -> str:
    return scope.get("state", {}).get("request_id") or "unknown"
