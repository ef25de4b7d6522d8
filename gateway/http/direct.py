"""The generating routes called straight from the ASGI call, without FastAPI's per-request work.

``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/responses``, ``/v1/messages`` and
``/v1/embeddings`` carry the gateway's fixed cost per request, which a client sees as added time
to first token (or, for embeddings, as the latency of a small request). Between its router and the
handler FastAPI matches the path against every route, opens two exit stacks and telemetry hooks,
parses the content type as an e-mail header, parses the body and solves the dependencies: ~300 µs
of CPU per request in one process, and on the chat workload at one stream the gateway's added
time to first token is about twice what it is with this module (docs/PERFORMANCE.md, "Speed
tricks"). A one-input embedding request over a fake backend, in process: 140 µs here, 289 µs
through FastAPI (medians of three runs of 1,000). ``DirectRoutes`` does only what these routes
need. It reads the body from ``receive`` itself (``read_body``: Starlette's ``Request.body`` runs
an async generator and an exit stack for it), parses it and validates it (``parse_body``), then
calls the handler with the app's ``Components``. The handler is the same function the FastAPI
route declares. Errors are answered
by the handlers ``http.errors`` installs, so clients get the same answers, in the same words and
with the same statuses.

The FastAPI routes stay declared. They give the OpenAPI document, and they answer every other
method and path (a GET is a 405, a trailing slash a redirect). A request whose path is not one of
these exactly, such as one under a root path, goes to FastAPI too, and gets the same answer there.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.http.deps import Components
from gateway.http.errors import (
    describe_validation,
    empty_body,
    error_handler_for,
    invalid_json,
    is_json,
    not_json,
    unreadable_body,
)
from gateway.http.routes import chat, completions, embeddings, messages, responses
from gateway.plan.embeddings import EmbeddingCreateRequest
from gateway.plan.messages_request import MessagesRequest
from gateway.plan.requests import ChatCompletionRequest, CompletionRequest
from gateway.plan.responses_request import ResponsesRequest

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class DirectRoute(Generic[M]):
    """A POST route's body model and its handler, the function its FastAPI route declares."""

    model: type[M]
    endpoint: Callable[[M, Request, Components], Awaitable[Response]]


DIRECT_ROUTES: Mapping[str, DirectRoute[Any]] = {
    "/v1/chat/completions": DirectRoute(ChatCompletionRequest, chat.create_chat_completion),
    "/v1/completions": DirectRoute(CompletionRequest, completions.create_completion),
    "/v1/responses": DirectRoute(ResponsesRequest, responses.create_response),
    "/v1/messages": DirectRoute(MessagesRequest, messages.create_message),
    "/v1/embeddings": DirectRoute(EmbeddingCreateRequest, embeddings.create_embeddings),
}


async def read_body(receive: Receive) -> bytes:
    """The request's whole body, as ``Request.body`` reads it; ``unreadable_body`` if the client
    left while sending it (``Request.body`` raises ``ClientDisconnect`` there, answered the same).
    Nothing reads the body again: the handlers take the parsed model."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise unreadable_body()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def parse_body(raw: bytes, content_type: str | None, model: type[M]) -> M:
    """The request body as ``model``, refused as FastAPI refuses it for a route that takes it.
    The ``http.errors`` handlers then word the refusal: a body not sent as JSON, an empty one, one
    that does not parse, and the first invalid field.

    The body parses with ``json.loads``, as FastAPI parses it. The model validates
    the parsed value in Python mode with ``from_attributes``, as FastAPI's ``TypeAdapter`` does,
    so the errors are the same."""
    if not is_json(content_type):
        raise not_json(content_type)
    if not raw:
        raise empty_body()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        raise invalid_json() from None
    except Exception:  # not UTF-8 (or UTF-16/32), nested too deep: FastAPI's catch-all
        raise unreadable_body() from None
    try:
        return model.model_validate(data, from_attributes=True)
    except ValidationError as exc:
        raise describe_validation([dict(error) for error in exc.errors(include_url=False)]) from None


class DirectRoutes:
    """Pure ASGI, the innermost of the gateway's middlewares. It answers POSTs to
    ``DIRECT_ROUTES`` and passes everything else to FastAPI.

    Exceptions are answered as Starlette's exception middleware answers them. The handler
    installed for the exception's class builds the response (``http.errors.error_handler_for``).
    Anything without one is a bug: it is raised on to the outermost 500, as before."""

    def __init__(
        self, app: ASGIApp, components: Components, routes: Mapping[str, DirectRoute[Any]] = DIRECT_ROUTES
    ) -> None:
        self.app = app
        self.components = components
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            try:
                raw = await read_body(receive)
            except Exception:  # the client left while sending it
                raise unreadable_body() from None
            body = parse_body(raw, request.headers.get("content-type"), route.model)
            response = await route.endpoint(body, request, self.components)
        except Exception as exc:
            handler = error_handler_for(exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await response(scope, receive, send)
