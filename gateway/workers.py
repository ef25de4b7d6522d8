"""Several gateway processes on one port (``--workers N``), under a small supervisor of our own.

One process tops out near one core (docs/PERFORMANCE.md); N workers use N. The parent process
binds one listening socket per worker, all on the same port with ``SO_REUSEPORT``, so the kernel
spreads new connections evenly over the workers (one shared socket would wake every worker and
leave the balance to whoever calls ``accept`` first). Each worker is a fresh interpreter (the
``spawn`` start method) that builds its own app and runs the same ``DrainingServer`` as a single
process, with its share of the admission limits (``worker_settings``).

Why not uvicorn's own supervisor (``uvicorn.supervisors.Multiprocess``): its workers run a plain
``uvicorn.Server``, not our ``DrainingServer``; once it has forwarded SIGTERM it waits for its
workers without a bound and no longer listens to a second signal; and it builds the app from an
import string in every worker. Here:

- **Drain.** The first SIGINT or SIGTERM is forwarded to every worker as SIGTERM (each drains its
  own streams for ``shutdown_grace_period``); a second is forwarded too (a worker stops at once);
  a worker still alive ``DRAIN_MARGIN`` seconds after its grace period is killed. The parent
  returns when every worker has exited. Workers run in their own process group, so a Ctrl-C in a
  terminal reaches them once, through the parent, not twice (which would skip the drain).
- **Embedded mode.** The parent starts the one Triton before the workers and stops it after them
  (``cli``); workers only ever see its URL.
- **Metrics.** The parent makes a fresh ``PROMETHEUS_MULTIPROC_DIR`` before the first worker
  starts, tells prometheus-client when a worker died (``mark_process_dead``: its live gauges stop
  counting) and removes the directory at the end (``gateway.metrics``).
- **Key limits.** Without Redis the workers count every key's limits together in one SQLite
  file in the same directory (``keys.limits.FileLimits``); SIGHUP reaches every worker, which
  reads the key file again.
- **A worker that dies** while the gateway serves is started again on a new socket; one that dies
  within ``EARLY_EXIT`` seconds of its start stops the gateway (a broken start repeats forever).
- **The parent dies** (SIGKILL): each worker gets SIGTERM from the kernel (``PR_SET_PDEATHSIG``)
  and drains.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType

from gateway.config import Settings
from gateway.core.admission import worker_share
from gateway.reasoning.seal import random_secret
from gateway.sockets import bind_shared

logger = logging.getLogger("gateway.workers")

DRAIN_MARGIN = 15.0
"""Seconds past ``shutdown_grace_period`` a draining worker gets before SIGKILL: what
``DrainingServer`` itself may take after the grace period (5 s for cancelled requests to end,
then uvicorn's own 5 s graceful shutdown), and some slack."""

EARLY_EXIT = 10.0
"""A worker that exits this soon after it started is not restarted: the gateway stops."""

BACKLOG = 2048  # uvicorn's default

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def worker_settings(settings: Settings, index: int) -> Settings:
    """The settings worker ``index`` runs with: its share of every admission limit
    (``core.admission.worker_share`` says how they round)."""
    n = settings.workers

    def slots(limit: int | None) -> int | None:
        return None if limit is None else worker_share(limit, n, index, zero_is_unlimited=True)

    def queue(limit: int | None) -> int | None:
        return None if limit is None else worker_share(limit, n, index, zero_is_unlimited=False)

    per_model = {
        model: limits.model_copy(
            update={
                "max_concurrent_requests": slots(limits.max_concurrent_requests),
                "max_queue_size": queue(limits.max_queue_size),
            }
        )
        for model, limits in settings.model_limits.items()
    }
    update = {
        "max_concurrent_requests": slots(settings.max_concurrent_requests),
        "max_queue_size": queue(settings.max_queue_size),
    }
    return settings.model_copy(update={**update, "model_limits": per_model})


def bind_socket(host: str, port: int) -> socket.socket:
    """The API port's listening socket, shared by every worker (``SO_REUSEPORT``) and inherited."""
    sock = bind_shared(host, port, BACKLOG)
    sock.set_inheritable(True)
    return sock


def serve_worker(settings: Settings, index: int, sock: socket.socket) -> None:
    """A worker's whole life: the app with this worker's limits, behind ``DrainingServer``."""
    _die_with_parent()
    os.setpgrp()  # a terminal's Ctrl-C reaches the parent only, which forwards it once
    import uvicorn

    from gateway.app import create_app
    from gateway.logs import configure_logging
    from gateway.server import DrainingServer

    configure_logging(settings.log_level, worker=index)
    mine = worker_settings(settings, index)
    app = create_app(mine)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=sock.getsockname()[1],
        log_level=settings.log_level,
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=5,
    )
    DrainingServer(config, app.state.components, settings.shutdown_grace_period).run(sockets=[sock])


def _die_with_parent() -> None:
    """SIGTERM (a drain) when the supervisor dies, however it dies."""
    parent = os.getppid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: the worker outlives a killed parent
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


@dataclass
class _Worker:
    index: int
    process: BaseProcess
    started: float


class Supervisor:
    """Starts ``settings.workers`` workers, forwards stop signals, restarts the ones that die."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._context = multiprocessing.get_context("spawn")
        self._workers: dict[int, _Worker] = {}
        self._signals: list[int] = []
        self._stopping_since: float | None = None
        self._port = settings.port

    def run(self) -> int:
        metrics_dir = tempfile.mkdtemp(prefix="gateway-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # read by prometheus_client in workers
        if self._settings.reasoning_secret is None:  # one secret for all workers: any may open a blob
            self._settings = self._settings.model_copy(update={"reasoning_secret": random_secret()})
        if self._settings.key_limits_file is None:
            shared = Path(metrics_dir) / "key-limits.sqlite"  # not *.db: prometheus-client reads those
            self._settings = self._settings.model_copy(update={"key_limits_file": shared})
        handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {s: signal.signal(s, self._on_signal) for s in handled}
        try:
            for index in range(self._settings.workers):
                self._start(index)
            logger.info("%d workers serving on port %d (metrics: %s)", len(self._workers), self._port, metrics_dir)
            return self._watch()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            for worker in self._workers.values():
                worker.process.kill()
                worker.process.join()
            del os.environ["PROMETHEUS_MULTIPROC_DIR"]
            shutil.rmtree(metrics_dir, ignore_errors=True)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)

    def _start(self, index: int) -> None:
        sock = bind_socket(self._settings.host, self._port)
        self._port = sock.getsockname()[1]  # port 0: the first socket picked it, the rest share it
        try:
            process = self._context.Process(
                target=serve_worker,
                args=(self._settings, index, sock),
                name=f"gateway-worker-{index}",
            )
            process.start()
        finally:
            sock.close()  # the worker holds its own copy now
        self._workers[index] = _Worker(index, process, time.monotonic())
        logger.info("worker %d started (pid %s)", index, process.pid)

    def _watch(self) -> int:
        code = 0
        while self._workers:
            sentinels = [w.process.sentinel for w in self._workers.values()]
            multiprocessing.connection.wait(sentinels, timeout=0.2)
            while self._signals:
                signum = self._signals.pop(0)
                if signum == signal.SIGHUP:
                    self._reload()
                else:
                    self._forward(signum)
            for index, worker in list(self._workers.items()):
                if worker.process.is_alive():
                    continue
                worker.process.join()
                del self._workers[index]
                self._mark_dead(worker)
                if self._stopping_since is not None:
                    continue
                lived = time.monotonic() - worker.started
                logger.error("worker %d (pid %s) exited with %s", index, worker.process.pid, worker.process.exitcode)
                if lived < EARLY_EXIT:
                    logger.error("it exited %.1f s after it started: stopping the gateway", lived)
                    code = 1
                    self._forward(signal.SIGTERM)
                else:
                    self._start(index)
            self._kill_late()
        return code

    def _forward(self, signum: int) -> None:
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()
            logger.info("%s: draining %d worker(s)", signal.Signals(signum).name, len(self._workers))
        else:
            logger.warning("second signal: workers stop at once")
        for worker in self._workers.values():
            if worker.process.pid is not None and worker.process.is_alive():
                os.kill(worker.process.pid, signal.SIGTERM)

    def _reload(self) -> None:
        """SIGHUP: every worker reads the key file again."""
        for worker in self._workers.values():
            if worker.process.pid is not None and worker.process.is_alive():
                os.kill(worker.process.pid, signal.SIGHUP)

    def _kill_late(self) -> None:
        if self._stopping_since is None:
            return
        if time.monotonic() - self._stopping_since < self._settings.shutdown_grace_period + DRAIN_MARGIN:
            return
        for worker in self._workers.values():
            if worker.process.is_alive():
                logger.error(
                    "worker %d (pid %s) still running after the drain: killed", worker.index, worker.process.pid
                )
                worker.process.kill()

    def _mark_dead(self, worker: _Worker) -> None:
        from prometheus_client.multiprocess import mark_process_dead

        if worker.process.pid is not None:
            mark_process_dead(worker.process.pid)  # type: ignore[no-untyped-call]


def run_workers(settings: Settings) -> int:
    """Serve with ``settings.workers`` processes until every worker has exited; the exit code."""
    return Supervisor(settings).run()
