"""``create_app(settings)``: the FastAPI application, its lifespan and its error mapping.

There is no module-level app: tests and the CLI build one from a ``Settings``. Every error leaves
through ``_gateway_error`` / ``_validation_error`` / ``_http_error`` / ``_unexpected_error`` so a
client always gets OpenAI's ``{"error": {...}}`` shape, never FastAPI's ``{"detail": ...}``.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.backend.transport.tls import TritonTLS
from gateway.backend.triton import TritonBackend
from gateway.backend.types import Backend
from gateway.config import Settings
from gateway.core.admission import Admission
from gateway.core.service import CompletionService
from gateway.errors import GatewayError, InvalidRequestError, error_body
from gateway.http.routes import chat, completions, health, metrics, models
from gateway.http.routes.common import ClientDisconnected, JSONBytesResponse
from gateway.http.security import ApiKeyMiddleware, BodySizeLimitMiddleware
from gateway.http.sse import BODY_SEND
from gateway.logs import request_id_var
from gateway.metrics import Metrics
from gateway.models.catalog import ModelCatalog

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-request-id"
_REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


class RequestIdMiddleware:
    """Accept ``X-Request-Id`` (or make one), keep it in ``scope["state"]`` for the Triton request
    id and logs, and echo it on the response. Pure ASGI: no per-request task or body buffering.

    It also leaves the ``send`` it was given in ``scope["state"]["body_send"]``: once a stream's
    headers are out, the wrappers between here and the route (this one, and Starlette's exception
    handlers, which only watch for the response start) pass body messages through untouched, so
    ``sse.SSEResponse`` writes its frames there directly, three calls fewer per token."""

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
        state[BODY_SEND] = send
        request_id_var.set(request_id)
        header = (b"x-request-id", request_id.encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        await self.app(scope, receive, send_with_id)


def _json_error(error: GatewayError) -> JSONBytesResponse:
    return JSONBytesResponse(error_body(error), status_code=error.status_code, headers=error.headers)


async def _gateway_error(request: Request, exc: Exception) -> JSONBytesResponse:
    assert isinstance(exc, GatewayError)
    if exc.status_code >= 500:
        logger.warning("%s %s -> %d: %s", request.method, request.url.path, exc.status_code, exc.message)
    return _json_error(exc)


def _describe_validation(errors: list[dict[str, Any]]) -> InvalidRequestError:
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        return InvalidRequestError("We could not parse the JSON body of your request.", code="invalid_json")
    param = ".".join(loc) or None
    message = str(first.get("msg", "invalid request"))
    if first.get("type") == "missing":
        message = f"'{param}' is a required property"
    elif param:
        message = f"Invalid value for '{param}': {message}"
    more = len(errors) - 1
    if more > 0:
        message += f" (and {more} more error{'s' if more > 1 else ''})"
    return InvalidRequestError(message, param=param, code="invalid_value" if first.get("type") != "missing" else None)


async def _validation_error(request: Request, exc: Exception) -> JSONBytesResponse:
    assert isinstance(exc, RequestValidationError)
    return _json_error(_describe_validation(list(exc.errors())))


async def _http_error(request: Request, exc: Exception) -> JSONBytesResponse:
    assert isinstance(exc, StarletteHTTPException)
    error = GatewayError(str(exc.detail), code=None)
    error.status_code = exc.status_code  # type: ignore[misc]
    error.error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"  # type: ignore[misc]
    if exc.status_code == 404:
        error.message = f"Unknown request URL: {request.method} {request.url.path}."
    return JSONBytesResponse(error_body(error), status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def _client_disconnected(request: Request, exc: Exception) -> JSONBytesResponse:
    # Nobody reads this; the status is for access logs (nginx's 499 convention).
    return JSONBytesResponse(
        {"error": {"message": "client disconnected", "type": "client_closed_request", "param": None, "code": None}},
        status_code=499,
    )


async def _unexpected_error(request: Request, exc: Exception) -> JSONBytesResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return _json_error(GatewayError("The server had an error while processing your request."))


def triton_tls(settings: Settings) -> TritonTLS | None:
    if not settings.triton_ssl:
        return None
    return TritonTLS(settings.triton_ssl_root_certs, settings.triton_ssl_client_cert, settings.triton_ssl_client_key)


def create_app(settings: Settings, backend: Backend | None = None) -> FastAPI:
    """Build the app. ``backend`` defaults to a ``TritonBackend`` on ``settings.triton_url``."""
    the_backend: Backend = backend or TritonBackend(
        settings.triton_url,
        keepalive_ms=settings.grpc_keepalive_ms,
        keepalive_timeout_ms=settings.grpc_keepalive_timeout_ms,
        max_message_bytes=settings.grpc_max_message_bytes,
        tls=triton_tls(settings),
        transport=settings.triton_transport,
    )
    catalog = ModelCatalog(the_backend, settings.model_repository, settings.model_refresh_interval)
    admission = Admission(lambda model: settings.limits_for(model)[:2], settings.queue_timeout)
    service = CompletionService(the_backend, catalog, settings, admission, Metrics(admission, catalog.adapter_count))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await the_backend.start()
        if backend is None:
            logger.info("token streams to Triton on the %s transport", settings.triton_transport)
        try:
            await catalog.refresh()
        except GatewayError as exc:
            logger.warning("Triton not reachable at startup (%s); will keep trying", exc.message)
        yield
        await the_backend.close()

    app = FastAPI(title="triton-openai-gateway", version="0.1.0", lifespan=lifespan)
    app.state.service = service
    app.state.settings = settings
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ClientDisconnected, _client_disconnected)
    app.add_exception_handler(Exception, _unexpected_error)
    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(chat.router)
    app.include_router(completions.router)
    if settings.metrics_enabled:
        app.include_router(metrics.router)
    # Middleware runs outermost-last-added: request id → CORS → auth → body limit → app.
    app.add_middleware(BodySizeLimitMiddleware, limit=settings.max_body_bytes)
    keys = settings.load_api_keys()
    if keys:
        app.add_middleware(ApiKeyMiddleware, keys=keys, protect_metrics=settings.metrics_require_auth)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["*"],
            expose_headers=["x-request-id"],
            max_age=600,
        )
    app.add_middleware(RequestIdMiddleware)
    return app
