"""Edge guards as pure ASGI middleware: API keys and the request body size limit.

Pure ASGI (not ``BaseHTTPMiddleware``) so that streaming responses pass through untouched and no
extra task is spawned per request.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import (
    AuthenticationError,
    GatewayError,
    PayloadTooLargeError,
)
from gateway.http.errors import error_payload


async def send_error(send: Send, error: GatewayError, path: str = "") -> None:
    """An error answered before the app sees the request, in the shape ``path``'s API uses."""
    status, body = error_payload(error, path)
    headers = [(b"content-type", b"application/json")]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": orjson.dumps(body)})


OWNER = "api_key_owner"
"""``scope["state"]`` key of the verified API key's sha256 (hex): whose stored responses a request
may see. Never the key itself."""


def request_owner(scope: Scope) -> str:
    """The sha256 of the request's API key, or "" when the gateway has no keys (every client is
    then the same owner)."""
    owner: str = scope.get("state", {}).get(OWNER, "")
    return owner


def key_matches(presented: bytes, keys: Iterable[bytes]) -> bool:
    """Compare against every key in constant time (no early exit on the first match)."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(presented, key)
    return found


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The API key a request presents: ``Authorization: Bearer <key>`` (OpenAI's SDKs), else
    ``x-api-key`` (Anthropic's SDKs); Authorization wins when both are sent. None when neither
    is there; b"" when Authorization is there but not a bearer token."""
    authorization: bytes | None = None
    api_key: bytes | None = None
    for name, value in headers:
        if name == b"authorization" and authorization is None:
            authorization = value
        elif name == b"x-api-key" and api_key is None:
            api_key = value
    if authorization is not None:
        scheme, _, token = authorization.partition(b" ")
        return token.strip() if scheme.lower() == b"bearer" else b""
    if api_key is not None:
        return api_key.strip()
    return None


class ApiKeyMiddleware:
    """``Authorization: Bearer <key>`` or ``x-api-key: <key>`` on protected paths (the API under
    ``/v1/``, and vLLM's ``/tokenize`` and ``/detokenize`` at the root); health endpoints always
    open. A request that passes carries its key's hash as its owner (``request_owner``)."""

    def __init__(self, app: ASGIApp, keys: frozenset[str], protect_metrics: bool) -> None:
        self.app = app
        self.keys = tuple(k.encode() for k in keys)
        api = ("/v1/", "/tokenize", "/detokenize")
        self.prefixes = (*api, "/metrics") if protect_metrics else api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS" or not scope["path"].startswith(self.prefixes):
            await self.app(scope, receive, send)
            return
        token = presented_key(scope["headers"])
        if not token:
            await send_error(
                send,
                AuthenticationError(
                    "Missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
                    headers={"WWW-Authenticate": "Bearer"},
                ),
                scope["path"],
            )
            return
        if not key_matches(token, self.keys):
            await send_error(
                send,
                AuthenticationError("Incorrect API key provided.", headers={"WWW-Authenticate": "Bearer"}),
                scope["path"],
            )
            return
        scope.setdefault("state", {})[OWNER] = hashlib.sha256(token).hexdigest()
        await self.app(scope, receive, send)


class BodySizeLimitMiddleware:
    """413 for bodies over the limit: at once from ``Content-Length``, else while reading a chunked
    body. The body is read here (it is small JSON that the app reads whole anyway) and replayed to
    the app, so an oversized body never reaches the request parser, which would call it a 400."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _error(self) -> PayloadTooLargeError:
        return PayloadTooLargeError(f"The request body is larger than the {self.limit} bytes this gateway accepts.")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                if value.isdigit() and int(value) > self.limit:
                    await send_error(send, self._error(), scope["path"])
                    return
                break
        chunks: list[bytes] = []
        size = 0
        first: Message | None = None
        while True:
            message = await receive()
            if message["type"] != "http.request":
                first = message  # the client left while sending: let the app see it
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await send_error(send, self._error(), scope["path"])
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replay: Message = first or {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        replayed = False

        async def replaying_receive() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return replay
            return await receive()

        await self.app(scope, replaying_receive, send)
