"""``/metrics`` on a port of its own (``metrics_port``), so that Prometheus scrapes it without an
API key while the port clients reach (and Ingress routes) serves no metrics at all.

One small uvicorn server per gateway process, started and stopped by the app's lifespan. Its
socket is bound with ``SO_REUSEPORT``, so every ``--workers`` process binds the same port (each
answers with the sum over all workers, as ``/metrics`` does), and listens from ``start`` on. It
installs no signal handlers: the main server's drain ends the process, and the lifespan this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.http.routes.metrics import metrics_page
from gateway.metrics import Metrics

logger = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """The main server's signals are its own: this one stops when the lifespan says so."""
        yield


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` that the other workers' sockets may share."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class MetricsListener:
    """GET (and HEAD) ``/metrics`` on ``host:port``; every other path is a 404."""

    def __init__(self, metrics: Metrics, host: str, port: int) -> None:
        async def page(request: Request) -> Response:
            return metrics_page(metrics)

        app = Starlette(routes=[Route("/metrics", page, methods=["GET"])])
        self._config = uvicorn.Config(app, lifespan="off", access_log=False, log_config=None)
        self._host, self._port = host, port
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.port: int | None = None
        """The port bound (``metrics_port`` 0: the one the kernel picked)."""

    async def start(self) -> None:
        sock = bind(self._host, self._port)
        self.port = sock.getsockname()[1]
        self._server = _Server(self._config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        logger.info("metrics on http://%s:%d/metrics (no API key)", self._host, self.port)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        await self._task
