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
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.http.routes.metrics import metrics_page
from gateway.metrics import Metrics
from gateway.sockets import bind_shared

logger = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """The main server's signals are its own: this one stops when the lifespan says so."""
        yield


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
        sock = bind_shared(self._host, self._port, 128)
        self.port = sock.getsockname()[1]
        self._server = _Server(self._config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        logger.info("metrics on http://%s:%d/metrics (no API key)", self._host, self.port)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        await self._task
