"""The server span of each ``/v1`` request (installed only when tracing is on: ``gateway.tracing``).

Pure ASGI, inside the API key check (a request refused for its key makes no span, so a client
without a key cannot fill the trace store) and inside the request id's context: the span starts
before anything else of the request runs and ends after the last byte of the response (a
stream's included). It is named by the template of the route that answered, never by the raw
path, which a client could make as many of as it likes. Health checks and metrics scrapes are not
traced: a probe every few seconds would bury the requests in the trace store.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.logs import trace_id_var
from gateway.tracing import Tracing, current_trace


def route_template(scope: Scope, direct_paths: frozenset[str]) -> str | None:
    """The template of the route that answered: the one FastAPI's router left in the scope, or
    the path of a route ``http.direct`` answered without the router (a path without parameters)."""
    template = getattr(scope.get("route"), "path", None)
    if isinstance(template, str):
        return template
    path: str = scope["path"]
    return path if path in direct_paths else None


class TracingMiddleware:
    def __init__(self, app: ASGIApp, tracing: Tracing, direct_paths: frozenset[str] = frozenset()) -> None:
        """``direct_paths``: the paths ``http.direct`` answers (``DIRECT_ROUTES``)."""
        self.app = app
        self.tracing = tracing
        self.direct_paths = direct_paths

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
            trace.end(status, route_template(scope, self.direct_paths))
