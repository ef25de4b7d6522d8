"""The batch runner: each gateway leases batch lines from the store, runs them, keeps their answers.

One loop per gateway process. Each turn it leases as many lines as it has free places
(``batch_concurrency``, each batch held to its ``max_concurrency`` across the fleet), renews the
leases of the lines it runs, stops the lines of batches cancelled meanwhile, closes the batches
that are done, and then sleeps until a line ends, a batch is created here, or
``batch_poll_interval`` passes.

A line runs through the ``LineRunner`` the HTTP edge gives (the same route, planning and core a
request takes) in the ``jobs_priority`` band, so it uses only idle capacity: when the model has
no free slot, the admission sheds it and the line waits and asks again (``LineAnswer.retry_after``)
without spending an attempt. A transient answer (a 5xx, or a 429 from the key's own limits) is
retried, up to ``batch_line_attempts``; any other answer is the line's, 2xx in the output file
and anything else in the error file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import orjson

from gateway.errors import GatewayError, error_body
from gateway.jobs.records import LeasedLine, new_id
from gateway.jobs.store import JobStore

logger = logging.getLogger(__name__)

RETRY_BACKOFF = (2.0, 10.0, 30.0, 60.0)
"""Seconds before a transiently failed line is tried again, by the attempts it has had."""

SHED_BACKOFF = (0.05, 1.0)
"""Seconds a line told "not now" waits before it asks again: the first wait, and the longest
(doubling between); jittered, so lines refused together do not come back together."""

PRUNE_EVERY = 300.0
"""Seconds between two deletions of expired files and batches."""

CENSUS_EVERY = 10.0
"""Seconds between two counts of batches and lines for the gauges."""


@dataclass(frozen=True, slots=True)
class LineCall:
    """One batch line to answer as its endpoint would answer the request."""

    url: str
    body: str
    owner: str
    """Whose batch it is (the stored responses' owner: ``key:<name>``, a key's sha256, or "")."""
    request_id: str


@dataclass(frozen=True, slots=True)
class LineAnswer:
    """The endpoint's answer, or ``retry_after``: not run now (no idle slot; the key's limits),
    to be tried again that many seconds later without counting an attempt."""

    status_code: int = 0
    body: bytes = b""
    retry_after: float | None = None


class LineRunner(Protocol):
    async def run(self, call: LineCall) -> LineAnswer: ...


class RunnerSettings(Protocol):
    @property
    def batch_runner(self) -> bool: ...
    @property
    def batch_concurrency(self) -> int: ...
    @property
    def batch_max_concurrency(self) -> int: ...
    @property
    def batch_lease_seconds(self) -> float: ...
    @property
    def batch_poll_interval(self) -> float: ...
    @property
    def batch_line_attempts(self) -> int: ...


class JobMetrics(Protocol):
    def batch_line_ended(self, result: str) -> None: ...
    def batch_lines_running(self, count: int) -> None: ...
    def batch_census(self, batches: dict[str, int], lines: dict[str, int]) -> None: ...


def runner_name() -> str:
    """This process among the gateways on one store: its host, pid, and a random part (a pid is
    reused after a restart; a lease of the process before must not pass for this one's)."""
    return f"{socket.gethostname()}:{os.getpid()}:{new_id('')[:8]}"


class BatchRunner:
    def __init__(
        self,
        store: JobStore,
        lines: LineRunner,
        settings: RunnerSettings,
        metrics: JobMetrics | None = None,
        clock: Callable[[], float] = time.time,
        name: str | None = None,
    ) -> None:
        self.store = store
        self.lines = lines
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.name = name or runner_name()
        self._running: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._leased: dict[tuple[str, int], LeasedLine] = {}
        self._stopped: dict[tuple[str, int], str] = {}
        """Lines this runner stopped because their batch was cancelled or expired: the state each ends in."""
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._renewed = 0.0
        self._pruned = 0.0
        self._counted = 0.0

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._loop(), name="batch-runner")

    def wake(self) -> None:
        """Look for lines now (a batch was just created here)."""
        self._wake.set()

    async def close(self) -> None:
        """Stop: the lines running here are stopped and given back at once, so another gateway
        (or this one after its restart) runs them without waiting for their leases to pass."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        held = list(self._leased.values())  # taken first: each line's task drops its own as it ends
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for leased in held:
            with contextlib.suppress(GatewayError):
                await self.store.release_line(self.name, leased, self.clock(), attempted=False)
        self._leased.clear()

    async def _loop(self) -> None:
        while True:
            try:
                await self.turn()
            except GatewayError as exc:  # the store unreachable: try again next turn
                logger.warning("batch runner: %s", exc.message)
            except Exception:  # a bug: said, and the runner goes on
                logger.exception("batch runner: a turn failed")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.batch_poll_interval)

    async def turn(self) -> None:
        """One pass: lease, renew, stop cancelled lines, close finished batches (public: the
        tests drive it)."""
        settings = self.settings
        now = self.clock()
        lease = settings.batch_lease_seconds
        free = settings.batch_concurrency - len(self._running)
        if settings.batch_runner and free > 0:
            for leased in await self.store.lease(self.name, now, lease, free, settings.batch_max_concurrency):
                if (leased.batch_id, leased.line) in self._running:
                    continue  # still running here, its lease run out while turns stalled: live again
                self._start_line(leased)
        if self._leased and now - self._renewed >= lease / 3:
            self._renewed = now
            await self.store.renew(self.name, list(self._leased), now + lease)
        if self._running:
            statuses = await self.store.statuses({batch_id for batch_id, _ in self._running})
            for key, task in list(self._running.items()):
                status, expires_at = statuses.get(key[0], ("gone", now))
                if key in self._stopped:
                    continue
                if status != "in_progress":  # cancelled (or deleted): its lines stop
                    self._stopped[key] = "cancelled"
                    task.cancel()
                elif expires_at <= now:  # its window is over: what runs now will not be kept
                    self._stopped[key] = "expired"
                    task.cancel()
        for batch_id, status, target in await self.store.closable(now, now - lease):
            if await self.store.claim_close(batch_id, status, target, now, now - lease):
                await self.store.close_batch(batch_id, target, now, self.clock())
                logger.info("batch %s %s", batch_id, target)
        if now - self._pruned >= PRUNE_EVERY:
            self._pruned = now
            await self.store.prune(now)
        if self.metrics is not None and now - self._counted >= CENSUS_EVERY:
            self._counted = now
            self.metrics.batch_census(*await self.store.census())

    def _start_line(self, leased: LeasedLine) -> None:
        key = (leased.batch_id, leased.line)
        self._leased[key] = leased
        task = asyncio.create_task(self._run_line(leased), name=f"batch-line-{leased.batch_id}-{leased.line}")
        self._running[key] = task
        if self.metrics is not None:
            self.metrics.batch_lines_running(len(self._running))

        def ended(_: asyncio.Task[None]) -> None:
            self._running.pop(key, None)
            self._leased.pop(key, None)
            self._stopped.pop(key, None)
            if self.metrics is not None:
                self.metrics.batch_lines_running(len(self._running))
            self._wake.set()

        task.add_done_callback(ended)

    async def _run_line(self, leased: LeasedLine) -> None:
        key = (leased.batch_id, leased.line)
        call = LineCall(leased.url, leased.body, leased.owner, new_id("batch_req_"))
        try:
            try:
                answer = await self._answer_when_admitted(call)
            except asyncio.CancelledError:
                stopped = self._stopped.get(key)
                if stopped is not None:  # its batch was cancelled or expired: the line is, too
                    await self.store.finish_line(self.name, leased, stopped, None, "")
                    self._ended(stopped)
                raise  # else the gateway is stopping: ``close`` gives the line back
            except Exception as exc:  # a bug in answering it: the line's answer is a 500
                logger.exception("batch %s line %d: answering it failed", leased.batch_id, leased.line)
                answer = LineAnswer(500, _server_error(exc))
            await self._keep(leased, answer)
        except GatewayError as exc:  # the store: the lease runs out and the line runs again
            logger.warning("batch %s line %d: %s", leased.batch_id, leased.line, exc.message)

    async def _answer_when_admitted(self, call: LineCall) -> LineAnswer:
        """The line's answer, waiting (with its lease, renewed) while it is told "not now": the
        model has no idle slot, or the key is at its limits. Kept here rather than given back to
        the store, so a saturated model costs a sleep, not a lease and a release per try."""
        backoff = SHED_BACKOFF[0]
        while True:
            answer = await self.lines.run(call)
            if answer.retry_after is None:
                return answer
            await asyncio.sleep(max(answer.retry_after, backoff) * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, SHED_BACKOFF[1])

    async def _keep(self, leased: LeasedLine, answer: LineAnswer) -> None:
        now = self.clock()
        status = answer.status_code
        transient = status >= 500 or status == 429
        if transient and leased.attempts + 1 < self.settings.batch_line_attempts:
            backoff = RETRY_BACKOFF[min(leased.attempts, len(RETRY_BACKOFF) - 1)]
            await self.store.release_line(self.name, leased, now + backoff, attempted=True)
            self._ended("retried")
            return
        state = "done" if 200 <= status < 300 else "error"
        if await self.store.finish_line(self.name, leased, state, status, answer.body.decode()):
            self._ended("completed" if state == "done" else "failed")

    def _ended(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.batch_line_ended(result)


def _server_error(exc: Exception) -> bytes:
    error = GatewayError(f"The gateway failed to answer this line ({type(exc).__name__}); the log says why.")
    return orjson.dumps(error_body(error))
