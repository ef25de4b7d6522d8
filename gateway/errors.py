"""The gateway's exception tree, and the one place that turns an exception into OpenAI's error body.

::

    GatewayError                        500 server_error
    ├── InvalidRequestError             400 invalid_request_error
    │   ├── ContextLengthExceededError  400 code=context_length_exceeded
    │   ├── ModelNotFoundError          404 code=model_not_found
    │   ├── ResponseNotFoundError       404 (a stored response: absent, expired or another key's)
    │   ├── AuthenticationError         401
    │   ├── PayloadTooLargeError        413
    │   └── TemplateError               400 (models/templates.py: the chat template refused)
    ├── RateLimitError                  429 (Retry-After)
    │   └── QueueRefusedError           429 (the scheduler: shed, queue full, deadline unmeetable)
    ├── BackendUnavailableError         503 code=backend_unavailable (Retry-After)
    │   ├── BackendUnreachableError     503 (the server, not one model: the replica pool ejects it)
    │   └── ShuttingDownError           503 code=shutting_down
    ├── ResponseStoreError              503 code=store_unavailable (store/base.py)
    ├── BackendTimeoutError             504
    └── BackendError                    500 (the backend failed the request)

Every layer raises these; the HTTP edge maps them with :func:`error_body` both for JSON responses
and for the error event of a stream that has already started, so a client sees the same shape
either way. Anthropic's Messages API (``/v1/messages``) gets the same errors in its own shape
(:func:`anthropic_error_body`, :func:`anthropic_status`).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar


class GatewayError(Exception):
    """Base of every error the gateway answers with; carries status, OpenAI type and code."""

    status_code: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"
    default_code: ClassVar[str | None] = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.headers = headers or {}


class InvalidRequestError(GatewayError):
    """The request is malformed or asks for something the gateway will not do."""

    status_code = 400
    error_type = "invalid_request_error"


class ContextLengthExceededError(InvalidRequestError):
    """The prompt (plus what was asked to be generated) does not fit the model's context."""

    default_code = "context_length_exceeded"


class ModelNotFoundError(InvalidRequestError):
    """No served model or adapter has that id."""

    status_code = 404
    default_code = "model_not_found"


class ResponseNotFoundError(InvalidRequestError):
    """No stored response with that id for this API key (absent, deleted, expired, or another
    key's: the same answer, so ids cannot be probed)."""

    status_code = 404


class JobNotFoundError(InvalidRequestError):
    """No file or batch with that id for this API key (the same answer for another key's)."""

    status_code = 404


class AuthenticationError(InvalidRequestError):
    """Missing or wrong API key."""

    status_code = 401
    error_type = "authentication_error"
    default_code = "invalid_api_key"


class PayloadTooLargeError(InvalidRequestError):
    """The request body or one of its parts is over a configured limit."""

    status_code = 413
    default_code = "request_too_large"


class RateLimitError(GatewayError):
    """The gateway's queue for the model is full; retry later or elsewhere."""

    status_code = 429
    error_type = "rate_limit_error"
    default_code = "rate_limit_exceeded"


class QueueRefusedError(RateLimitError):
    """The scheduler refused the request before it reached Triton; ``reason`` (``sheddable``,
    ``queue_full``, ``displaced``, ``deadline``, ``timeout``) labels the shed-requests counter."""

    def __init__(self, message: str, *, reason: str, code: str, retry_after: float = 1.0) -> None:
        super().__init__(message, code=code, headers={"Retry-After": str(max(1, math.ceil(retry_after)))})
        self.reason = reason


class BackendUnavailableError(GatewayError):
    """Triton or the model is not reachable or not ready."""

    status_code = 503
    error_type = "service_unavailable"
    default_code = "backend_unavailable"


class BackendUnreachableError(BackendUnavailableError):
    """The Triton server itself cannot take work (no connection, lost connection, an unhealthy
    engine), as opposed to one model on it not being ready: with several replicas, the pool
    ejects the server for a while and places requests elsewhere."""


class ShuttingDownError(BackendUnavailableError):
    """The gateway is draining for shutdown: retry on another replica."""

    default_code = "shutting_down"


class BackendTimeoutError(GatewayError):
    """The request's deadline passed before the backend finished."""

    status_code = 504
    error_type = "timeout_error"
    default_code = "timeout"


class BackendError(GatewayError):
    """The backend accepted the request and then failed it."""

    status_code = 500
    error_type = "server_error"
    default_code = "backend_error"


def error_body(error: GatewayError) -> dict[str, Any]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {
        "error": {
            "message": error.message,
            "type": error.error_type,
            "param": error.param,
            "code": error.code,
        }
    }


ANTHROPIC_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}
"""Anthropic's error type per HTTP status (its SDKs raise by status, clients read the type)."""

ANTHROPIC_OVERLOADED = 529
"""Anthropic answers an overloaded service with 529, where OpenAI's shape says 503."""


def anthropic_status(status: int) -> int:
    """The status Anthropic's API would answer where the gateway's own says ``status``."""
    return ANTHROPIC_OVERLOADED if status == 503 else status


def anthropic_error_body(error: GatewayError) -> dict[str, Any]:
    """Anthropic's error object: ``{"type": "error", "error": {"type", "message"}}``. It has no
    ``param``: the field goes in front of the message (``messages.0.content.1.type: ...``), as
    Anthropic words its own validation errors, unless the message already names it."""
    status = error.status_code
    kind = ANTHROPIC_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")
    message = error.message
    if error.param and error.param not in message:
        message = f"{error.param}: {message}"
    return {"type": "error", "error": {"type": kind, "message": message}}
