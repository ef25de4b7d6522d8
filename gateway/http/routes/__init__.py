"""HTTP routes: one module per endpoint group, each handler a few lines.

The POSTs ``http.direct`` calls (chat, completions, responses, messages, embeddings) are declared
in these modules for FastAPI too, which builds the OpenAPI document from them and answers their
other methods; ``http.direct`` calls the same handler functions for the requests themselves."""

from __future__ import annotations

import logging

from pydantic import BaseModel
from starlette.requests import Request

from gateway.errors import InvalidRequestError

logger = logging.getLogger(__name__)


def log_unknown_fields(body: BaseModel) -> None:
    """Fields OpenAI (or a newer client) sends that the gateway ignores: visible at debug level."""
    if body.model_extra and logger.isEnabledFor(logging.DEBUG):
        logger.debug("ignoring unknown fields: %s", sorted(body.model_extra))


def page_limit(request: Request, *, default: int = 20, most: int = 100) -> int:
    """A list's ``limit`` query parameter, from 1 to ``most`` (OpenAI's lists: 20 by default)."""
    limit = request.query_params.get("limit", str(default))
    if not limit.isdigit() or not 1 <= int(limit) <= most:
        raise InvalidRequestError(f"limit must be an integer from 1 to {most}, got {limit!r}", param="limit")
    return int(limit)


def page_order(request: Request) -> str:
    """A list's ``order`` query parameter: ``asc`` or ``desc`` (the default: newest first)."""
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequestError(f"order must be 'asc' or 'desc', got {order!r}", param="order")
    return order
