"""Counting the completion requests refused before they had an outcome.

From admission on, a completion request is counted by its ``core.outcome.RequestOutcome``, once,
whatever ends it. What refuses it before that (the API key, the body size limit, a body that is
not JSON or fails the schema, an unknown model, a prompt over the context, any other 4xx of
planning) has no outcome to count it, and happens in several layers: this middleware, outside
them all, counts the answer instead, in ``gateway_requests_total`` (``Metrics.rejected``).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.metrics import Metrics

ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
    "/v1/embeddings": "embeddings",
}
"""The counted routes' paths → their ``endpoint`` label (``GenerationPlan.endpoint``,
``core.embed.ENDPOINT``)."""

_COUNTED = "counted_by_outcome"
"""``scope["state"]`` key set once the request's outcome exists: it counts the request then."""


def mark_counted_by_outcome(scope: Scope) -> None:
    scope.setdefault("state", {})[_COUNTED] = True


class RejectionCountMiddleware:
    """Pure ASGI, for POSTs to the completion routes only; it reads the response start alone."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = ENDPOINTS.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        started = False

        async def send_counting(message: Message) -> None:
            nonlocal started
            if not started and message["type"] == "http.response.start":
                started = True
                if not state.get(_COUNTED):
                    self.metrics.rejected(endpoint, message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_counting)
        except Exception:
            if not (started or state.get(_COUNTED)):  # Starlette's outermost handler answers 500
                self.metrics.rejected(endpoint, 500)
            raise
