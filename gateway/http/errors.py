"""Errors → HTTP, in one place: the JSON error response and the SSE error event.

Both carry ``errors.error_body`` (OpenAI's ``{"error": {...}}``), so a client sees the same shape
whether a request failed before its stream started or in the middle of it. Requests to
Anthropic's Messages API (``/v1/messages`` and below) get Anthropic's shape and statuses instead
(``errors.anthropic_error_body``), chosen here by path for every error, the edge guards'
included. The handlers installed by ``install_error_handlers`` make sure no error leaves in
FastAPI's ``{"detail": ...}`` shape.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request

from gateway.errors import GatewayError, InvalidRequestError, anthropic_error_body, anthropic_status, error_body
from gateway.http.json_response import JSONBytesResponse
from gateway.http.sse import data_frame
from gateway.tracing import current_trace

logger = logging.getLogger(__name__)


class ClientDisconnected(Exception):
    """The HTTP client went away before a non-streaming answer was ready."""


ANTHROPIC_PREFIX = "/v1/messages"


def is_anthropic_path(path: str) -> bool:
    """Whether a request speaks Anthropic's Messages API, whose errors have Anthropic's shape."""
    return path == ANTHROPIC_PREFIX or path.startswith(ANTHROPIC_PREFIX + "/")


def error_payload(error: GatewayError, path: str) -> tuple[int, dict[str, Any]]:
    """The status and JSON body answering ``error`` on ``path``: OpenAI's, or Anthropic's on its paths."""
    if is_anthropic_path(path):
        return anthropic_status(error.status_code), anthropic_error_body(error)
    return error.status_code, error_body(error)


def error_response(error: GatewayError, path: str = "") -> JSONBytesResponse:
    """The JSON answer to a request that failed before any of its body was sent."""
    _traced(error)
    status, body = error_payload(error, path)
    return JSONBytesResponse(body, status_code=status, headers=error.headers)


def error_event(error: GatewayError) -> bytes:
    """The SSE event that ends a stream which failed after its headers were sent (no ``[DONE]``
    follows: the openai SDK raises ``APIError`` on it)."""
    _traced(error)
    return data_frame(orjson.dumps(error_body(error)))


def _traced(error: GatewayError) -> None:
    """The request's span (tracing on) says how it failed: both answers of an error pass here."""
    trace = current_trace.get()
    if trace is not None:
        trace.failed(error.error_type, error.status_code, error.message)


def is_json(content_type: str | None) -> bool:
    """Whether FastAPI reads a body with this ``Content-Type`` as JSON: ``application/json`` or
    another ``application/*+json`` (RFC 6839), any parameters."""
    media = (content_type or "").partition(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def not_json(content_type: str | None) -> InvalidRequestError:
    """A POST body sent as anything but JSON. FastAPI does not parse it then, so it would fail the
    schema as a whole ("Input should be a valid dictionary"), which tells the client nothing. 400
    rather than 415, as vLLM's server answers (it moved from 415 to 400) and as every other bad
    body is answered: OpenAI's SDKs raise ``BadRequestError`` for it."""
    got = f"'{content_type}'" if content_type else "none"
    return InvalidRequestError(
        f"The request body must be JSON, sent with 'Content-Type: application/json' (got {got}).",
        code="unsupported_media_type",
    )


def invalid_json() -> InvalidRequestError:
    """A body sent as JSON that does not parse."""
    return InvalidRequestError("We could not parse the JSON body of your request.", code="invalid_json")


def empty_body() -> InvalidRequestError:
    """A JSON body that is empty."""
    return InvalidRequestError("The request body is empty: it must be a JSON object.", code="invalid_json")


def unreadable_body() -> InvalidRequestError:
    """A body that could not be read or decoded at all (not UTF-8, nested beyond the parser's
    depth, the client gone while sending it): FastAPI's own words for it."""
    return InvalidRequestError("There was an error parsing the body")


def describe_validation(errors: list[dict[str, Any]]) -> InvalidRequestError:
    """Validation errors (FastAPI's, or pydantic's of a body) → one 400 naming the first bad
    param, as OpenAI words it."""
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        return invalid_json()
    if not loc and first.get("type") == "missing":
        return empty_body()
    if not loc and first.get("type") in ("model_attributes_type", "dict_type"):
        return InvalidRequestError("The request body must be a JSON object.", code="invalid_type")
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


async def _gateway_error(request: Request, exc: Exception) -> JSONBytesResponse:
    assert isinstance(exc, GatewayError)
    if exc.status_code >= 500:
        logger.warning("%s %s -> %d: %s", request.method, request.url.path, exc.status_code, exc.message)
    return error_response(exc, request.url.path)


async def _validation_error(request: Request, exc: Exception) -> JSONBytesResponse:
    assert isinstance(exc, RequestValidationError)
    content_type = request.headers.get("content-type")
    if request.method == "POST" and not is_json(content_type):  # FastAPI left the body unread
        return error_response(not_json(content_type), request.url.path)
    return error_response(describe_validation(list(exc.errors())), request.url.path)


async def _http_error(request: Request, exc: Exception) -> JSONBytesResponse:
    assert isinstance(exc, StarletteHTTPException)
    error = GatewayError(str(exc.detail), code=None)
    error.status_code = exc.status_code  # type: ignore[misc]
    error.error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"  # type: ignore[misc]
    if exc.status_code == 404:
        error.message = f"Unknown request URL: {request.method} {request.url.path}."
    status, body = error_payload(error, request.url.path)
    return JSONBytesResponse(body, status_code=status, headers=getattr(exc, "headers", None))


async def _client_disconnected(request: Request, exc: Exception) -> JSONBytesResponse:
    # Nobody reads this; the status is for access logs (nginx's 499 convention).
    return JSONBytesResponse(
        {"error": {"message": "client disconnected", "type": "client_closed_request", "param": None, "code": None}},
        status_code=499,
    )


async def _unexpected_error(request: Request, exc: Exception) -> JSONBytesResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(GatewayError("The server had an error while processing your request."), request.url.path)


ErrorHandler = Callable[[Request, Exception], Awaitable[JSONBytesResponse]]

_HANDLERS: dict[type[Exception], ErrorHandler] = {
    GatewayError: _gateway_error,
    RequestValidationError: _validation_error,
    StarletteHTTPException: _http_error,
    ClientDisconnected: _client_disconnected,
}
"""The errors answered where they are raised; anything else is a bug, answered 500 outermost."""


def install_error_handlers(app: FastAPI) -> None:
    for exc_class, handler in _HANDLERS.items():
        app.add_exception_handler(exc_class, handler)
    app.add_exception_handler(Exception, _unexpected_error)


def error_handler_for(exc: Exception) -> ErrorHandler | None:
    """The handler ``install_error_handlers`` gave ``exc``'s class (its nearest registered base,
    as Starlette looks it up), for ``http.direct``, which runs its routes outside Starlette's
    exception middleware; None for the unexpected, left to the outermost 500."""
    for cls in type(exc).__mro__:
        handler = _HANDLERS.get(cls)
        if handler is not None:
            return handler
    return None
