"""Edge guards as pure ASGI middleware: API keys (and their limits) and the request body size limit.

Pure ASGI (not ``BaseHTTPMiddleware``) so that streaming responses pass through untouched and no
extra task is spawned per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.anthropic.ratelimit import rate_headers as anthropic_rate_headers
from gateway.errors import (
    AuthenticationError,
    GatewayError,
    PayloadTooLargeError,
    RateLimitError,
)
from gateway.http.errors import error_payload, is_anthropic_path
from gateway.keys.context import RequestKey, current_key, keys_required
from gateway.keys.limits import Admit, LimitStore, LimitUnavailable, rate_headers, retry_after
from gateway.keys.policy import KeyPolicy, KeyRing, hash_key
from gateway.metrics import Metrics


async def send_error(
    send: Send, error: GatewayError, path: str = "", extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """An error answered before the app sees the request, in the shape ``path``'s API uses;
    ``extra``: headers beside the error's own (a key's rate-limit headers)."""
    status, body = error_payload(error, path)
    headers = [(b"content-type", b"application/json")]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()]
    headers += extra or []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": orjson.dumps(body)})


OWNER = "api_key_owner"
"""``scope["state"]`` key of whose stored responses a request may see: ``key:<name>`` for a named
key (a rotated key keeps its conversations), else the key's sha256 (hex). Never the key itself."""

PROBES = frozenset({"/health", "/health/live", "/health/ready"})
"""The paths answered without a key on a gateway with keys (Kubernetes' probes, load balancers):
without one they name no model (``keys.context.models_visible``)."""

UPLOAD_FRAMING_BYTES = 64 * 1024
"""Room for a multipart upload's boundaries and form fields around its file."""

LIMITED_PATHS = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/embeddings"}
)
"""The POSTs a key's limits count: the ones that run a model."""

COUNTING_PATHS = frozenset({"/tokenize", "/v1/messages/count_tokens", "/v1/responses/input_tokens"})
"""The POSTs that count a prompt's tokens: against a key's ``rpm`` only (they take no slot and
spend no tokens; the tokenizer's work is what ``rpm`` bounds)."""

_LIMIT_WORDS = {
    "concurrency": "concurrent requests",
    "requests": "requests per minute (RPM)",
    "tokens": "tokens per minute (TPM)",
}


def request_owner(scope: Scope) -> str:
    """Whose stored responses the request may see (``OWNER``), or "" when the gateway has no keys
    (every client is then the same owner)."""
    owner: str = scope.get("state", {}).get(OWNER, "")
    return owner


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


def _refusal(policy: KeyPolicy, admit: Admit) -> RateLimitError:
    limit = {"concurrency": policy.max_concurrent, "requests": policy.rpm, "tokens": policy.tpm}
    assert admit.refused is not None
    used = {"concurrency": limit["concurrency"], "requests": admit.requests, "tokens": admit.tokens}
    return RateLimitError(
        f"Rate limit reached for key '{policy.name}' on {_LIMIT_WORDS[admit.refused]}: "
        f"limit {limit[admit.refused]}, used {used[admit.refused]}.",
        headers={"Retry-After": str(retry_after(admit))},
    )


def is_preflight(scope: Scope) -> bool:
    """A CORS preflight: browsers send it without credentials, so it cannot carry a key."""
    if scope["method"] != "OPTIONS":
        return False
    names = {name for name, _ in scope["headers"]}
    return b"origin" in names and b"access-control-request-method" in names


def missing_key() -> AuthenticationError:
    return AuthenticationError(
        "Missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
        headers={"WWW-Authenticate": "Bearer"},
    )


def wrong_key() -> AuthenticationError:
    return AuthenticationError("Incorrect API key provided.", headers={"WWW-Authenticate": "Bearer"})


class ApiKeyMiddleware:
    """Closed by default: every path needs ``Authorization: Bearer <key>`` or ``x-api-key: <key>``
    (the API, vLLM's ``/tokenize`` and ``/detokenize``, the OpenAPI document and its pages, paths
    nothing serves) but ``open_paths`` (the probes, and ``/metrics`` when the operator opens it)
    and CORS preflights, so a client without a key learns nothing from the answer but that it
    needs one. An open path still reads a key it is sent: the probes name models to a client
    with one. A request that passes carries its owner (``request_owner``) and its key
    (``keys.context.current_key``); a generating POST with a limited key is admitted by ``limits``
    first (429 over a limit) and every answer to it carries OpenAI's ``x-ratelimit-*`` headers
    (Anthropic's ``anthropic-ratelimit-*`` on ``/v1/messages``)."""

    def __init__(
        self,
        app: ASGIApp,
        ring: KeyRing,
        open_paths: frozenset[str] = PROBES,
        limits: LimitStore | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.app = app
        self.ring = ring
        self.open_paths = open_paths
        self.limits = limits
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        required = keys_required.set(True)
        try:
            await self._checked(scope, receive, send)
        finally:
            keys_required.reset(required)

    async def _checked(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = presented_key(scope["headers"])
        digest = hash_key(token) if token else None
        policy = self.ring.lookup_digest(digest) if digest is not None else None
        if policy is None:
            if scope["path"] in self.open_paths or is_preflight(scope):
                await self.app(scope, receive, send)  # no key context: no detail
            else:
                await send_error(send, missing_key() if not token else wrong_key(), scope["path"])
            return
        assert digest is not None
        state = scope.setdefault("state", {})
        state[OWNER] = f"key:{policy.name}" if policy.name else digest
        limits = self.limits if policy.limited else None
        reset = current_key.set(RequestKey(policy, limits))
        try:
            if limits is None or scope["method"] != "POST":
                await self.app(scope, receive, send)
            elif scope["path"] in LIMITED_PATHS:
                await self._limited(policy, limits, scope, receive, send, generating=True)
            elif scope["path"] in COUNTING_PATHS:
                await self._limited(policy, limits, scope, receive, send, generating=False)
            else:
                await self.app(scope, receive, send)
        finally:
            current_key.reset(reset)

    async def _limited(
        self, policy: KeyPolicy, limits: LimitStore, scope: Scope, receive: Receive, send: Send, *, generating: bool
    ) -> None:
        try:
            admit = await limits.admit(policy, generating=generating)
        except LimitUnavailable as exc:
            await send_error(send, exc, scope["path"])
            return
        headers = (anthropic_rate_headers if is_anthropic_path(scope["path"]) else rate_headers)(policy, admit)
        if admit.refused is not None:
            if self.metrics is not None and policy.name is not None:
                self.metrics.limited(policy.name, admit.refused)
            await send_error(send, _refusal(policy, admit), scope["path"], headers)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *headers]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            if admit.lease is not None:
                await asyncio.shield(limits.release(policy, admit))


class BodySizeLimitMiddleware:
    """413 for bodies over the limit: at once from ``Content-Length``, else while reading a chunked
    body. The body is read here (it is small JSON that the app reads whole anyway) and replayed to
    the app, so an oversized body never reaches the request parser, which would call it a 400.
    A path with a limit of its own (an upload) is not read here but counted as the app reads it,
    so a large upload is not held whole in memory before its route streams it to a file."""

    def __init__(self, app: ASGIApp, limit: int, limits_by_path: Mapping[str, int] | None = None) -> None:
        self.app = app
        self.limit = limit
        self.limits_by_path = dict(limits_by_path or {})
        """Paths with a limit of their own (``/v1/files``: a batch file is far larger than a request)."""

    def _error(self, limit: int) -> PayloadTooLargeError:
        return PayloadTooLargeError(f"The request body is larger than the {limit} bytes this gateway accepts.")

    def _counting(self, receive: Receive, limit: int) -> Receive:
        """``receive``, raising the 413 once more than ``limit`` bytes came (the route lets it through)."""
        size = 0

        async def counted() -> Message:
            nonlocal size
            message = await receive()
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > limit:
                    raise self._error(limit)
            return message

        return counted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        limit = self.limits_by_path.get(scope["path"], self.limit)
        for name, value in scope["headers"]:
            if name == b"content-length":
                if value.isdigit() and int(value) > limit:
                    await send_error(send, self._error(limit), scope["path"])
                    return
                break
        if scope["path"] in self.limits_by_path:
            await self.app(scope, self._counting(receive, limit), send)
            return
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
            if size > limit:
                await send_error(send, self._error(limit), scope["path"])
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
