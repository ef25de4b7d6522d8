"""The server span of each ``/v1`` request (installed only when tracing is on: ``gateway.tracing``).

Pure ASGI, outside the request id middleware's work but inside its context: the span starts
before anything else of the request runs, continuing the client's ``traceparent``, and ends
after the last byte of the response (a stream's included). Health checks and metrics scrapes
are not traced: a probe every few seconds would bury the requests in the trace store.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.logs import trace_id_var
from gateway.tracing import Tracing, current_trace


class TracingMiddleware:
    def __init__(self, app: ASGIApp, tracing: Tracing) -> None:
        self.app = app
        self.tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        trace = self.tracing.start(scope["headers"], scope["method"], path)
        request_id = scope.get("state", {}).get("request_id")
        if request_id is not None:
            trace.span.set_attribute("gateway.request_id", request_id)
        current_trace.set(trace)
        trace_id_var.set(trace.trace_id)
        status: int | None = None

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except BaseException:
            status = status or 500
            raise
        finally:
            trace.end(status)
