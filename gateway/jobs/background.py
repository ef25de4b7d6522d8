"""Background responses in this process: each one's event log, and the registry of those it runs.

A background response (``POST /v1/responses`` with ``background: true``) runs in a task the
gateway owns, not the client's: the client may leave, poll ``GET /v1/responses/{id}``, or stream
its events again from any point (``?stream=true&starting_after=N``). The Response object goes to
the store at every change of status, so every replica sharing the store can answer a GET; the
events themselves are kept here, in memory, by the process that runs the response.

``EventLog`` keeps one response's events as its stream writes them (SSE frames, one event each,
the ``n``-th with ``sequence_number`` ``n``), and hands each reader (``LogReader``) those after
the sequence number it asks for, then each new one as it is logged, until the log closes. It is
bounded in bytes: past ``max_bytes`` its oldest events go, and a reader asking for them is told
so (``EventsDroppedError``) rather than given a stream with a gap.

``BackgroundResponses`` runs each response's task (at most ``max_running`` at once) and keeps
its log while it runs and for ``retention`` seconds after (at most ``max_finished`` finished ones,
``max_finished_bytes`` of their events together), and cancels: a response
asked to stop (``cancel``, or every one at ``close``, the gateway stopping) has its task cancelled,
unless it is already writing its end (``BackgroundJob.settle``). What each task does (plan,
admit, generate, store) is the HTTP edge's (``http.background_answer``): this module knows no
layer of the gateway (it is asyncio, and the errors it refuses a job with).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any, Literal

from gateway.errors import RateLimitError, ShuttingDownError

logger = logging.getLogger(__name__)

LOG_RETENTION = 600.0
"""Seconds a finished response's events stay streamable (``GET ?stream=true``) in this process."""
LOG_MAX_BYTES = 4 * 2**20
"""Bytes of events one log holds; past them its oldest events go (a response of tens of thousands
of tokens, at ~150 bytes an event)."""
MAX_FINISHED = 1024
"""Finished responses whose logs are kept at most, the oldest dropped first."""
MAX_FINISHED_BYTES = 256 * 2**20
"""Bytes of events the finished responses' logs hold together at most, the oldest dropped first."""
MAX_RUNNING = 4096
"""Background responses one process runs (or holds queued) at once; more are refused (429)."""
CLOSE_WAIT = 10.0
"""Seconds ``close`` waits for the cancelled tasks to store their end."""
FRAME_END = b"\n\n"
"""What ends each event's bytes (an SSE frame), and occurs nowhere inside one: its JSON is one line."""

CancelReason = Literal["cancelled", "shutdown", "deleted"]
"""Why a task was asked to stop: its owner cancelled it, the gateway is stopping, or its owner
deleted the response (nothing more is stored then)."""


class EventsDroppedError(Exception):
    """The events a reader asked for are no longer held: the log dropped its oldest to stay in
    its bound (a reader that started too early, or fell too far behind)."""

    def __init__(self, held_from: int) -> None:
        super().__init__(f"events before sequence number {held_from} are no longer held")
        self.held_from = held_from


class EventLog:
    """One response's events, in order: replayed from any sequence number, then followed live.

    Events arrive in chunks (one stream frame: several events, or one token's); a chunk is kept
    whole, and split at frame ends only for a reader that starts inside one."""

    __slots__ = ("max_bytes", "closed", "_chunks", "_firsts", "_base", "_count", "_bytes", "_changed")

    def __init__(self, max_bytes: int = LOG_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.closed = False
        """No event comes after those logged: readers end once they have them."""
        self._chunks: list[bytes] = []
        self._firsts: list[int] = []
        """The sequence number of each held chunk's first event."""
        self._base = 0
        """Chunks dropped so far: a chunk's absolute index is its place in ``_chunks`` plus it."""
        self._count = 0
        """Events logged: the next one's sequence number."""
        self._bytes = 0
        self._changed = asyncio.Event()

    @property
    def events(self) -> int:
        """How many events were logged (the next one's sequence number)."""
        return self._count

    @property
    def size(self) -> int:
        """Bytes of events held."""
        return self._bytes

    @property
    def held_from(self) -> int:
        """The sequence number of the oldest event still held (``events`` when none is)."""
        return self._firsts[0] if self._firsts else self._count

    def append(self, data: bytes) -> None:
        """Log a chunk of whole frames; every reader waiting wakes."""
        if self.closed:
            raise RuntimeError("the event log is closed")
        if not data:
            return
        self._chunks.append(data)
        self._firsts.append(self._count)
        self._count += data.count(FRAME_END)
        self._bytes += len(data)
        if self._bytes > self.max_bytes:
            self._drop()
        self._wake()

    def close(self) -> None:
        """No more events: readers end after the last one (idempotent)."""
        if not self.closed:
            self.closed = True
            self._changed.set()  # stays set: a reader that waits now returns at once

    def reader(self, after: int = -1) -> LogReader:
        """The events after sequence number ``after`` (-1: all), then the live ones. Raises
        ``EventsDroppedError`` when some of those are no longer held."""
        return LogReader(self, after)

    def _drop(self) -> None:
        """Drop the oldest chunks down to three quarters of the bound (one slice, not one per
        append), always keeping the newest chunk."""
        target, dropped, freed = self.max_bytes * 3 // 4, 0, 0
        while dropped < len(self._chunks) - 1 and self._bytes - freed > target:
            freed += len(self._chunks[dropped])
            dropped += 1
        del self._chunks[:dropped], self._firsts[:dropped]
        self._base += dropped
        self._bytes -= freed

    def _wake(self) -> None:
        changed = self._changed
        changed.set()  # wakes every reader waiting now; those that wait later wait for the next
        changed.clear()

    def _start(self, after: int) -> tuple[int, int]:
        """Where a reader of the events after ``after`` starts: a chunk's absolute index, and how
        many of that chunk's events it skips."""
        wanted = max(after + 1, 0)
        if wanted >= self._count:
            return self._base + len(self._chunks), 0
        if wanted < self.held_from:
            raise EventsDroppedError(self.held_from)
        index = bisect.bisect_right(self._firsts, wanted) - 1
        return self._base + index, wanted - self._firsts[index]

    def _since(self, chunk: int, skip: int) -> bytes:
        """The bytes of every held chunk from absolute index ``chunk``, its first ``skip`` events
        left out."""
        if chunk < self._base:
            raise EventsDroppedError(self.held_from)
        held = self._chunks[chunk - self._base :]
        if skip and held:
            frames = held[0].split(FRAME_END)
            held = [FRAME_END.join(frames[skip:]), *held[1:]]
        return held[0] if len(held) == 1 else b"".join(held)


class LogReader:
    """One reader's events: an ``http.sse.Frames`` (``ended`` once the log closed and the bytes
    just returned were its last). Closing it stops only the reading: the response runs on."""

    __slots__ = ("_log", "_chunk", "_skip", "ended")

    def __init__(self, log: EventLog, after: int) -> None:
        self._log = log
        self._chunk, self._skip = log._start(after)
        self.ended = False

    def __aiter__(self) -> LogReader:
        return self

    async def __anext__(self) -> bytes:
        log = self._log
        while not self.ended:
            end = log._base + len(log._chunks)
            if self._chunk < end:
                out = log._since(self._chunk, self._skip)
                self._chunk, self._skip = end, 0
                self.ended = log.closed
                return out
            if log.closed:
                self.ended = True
                return b""
            await log._changed.wait()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self.ended = True


class BackgroundJob:
    """One background response running (or run) in this process."""

    __slots__ = ("response_id", "owner", "log", "task", "started", "cancel_reason", "settled", "result", "finished_at")

    def __init__(self, response_id: str, owner: str, log: EventLog) -> None:
        self.response_id = response_id
        self.owner = owner
        self.log = log
        self.task: asyncio.Task[None] | None = None
        self.started = False
        """The task began to run (a task cancelled before that would never run its own end)."""
        self.cancel_reason: CancelReason | None = None
        """Why the task was asked to stop (None: it was not)."""
        self.settled = False
        """The task is writing its end (its final events, its final object): too late to cancel."""
        self.result: dict[str, Any] | None = None
        """The last object the task stored (its final one, once it ended)."""
        self.finished_at: float | None = None

    @property
    def done(self) -> bool:
        return self.task is None or self.task.done()

    def settle(self) -> None:
        """The task begins its end: a cancel from now on changes nothing."""
        self.settled = True

    def cancel(self, reason: CancelReason) -> bool:
        """Ask the task to stop; False when it is done or already writing its end. The first
        reason stays (a cancel during shutdown is still the owner's), but ``deleted`` wins over
        any: nothing may be stored after a delete, whatever the task is doing. A task that has
        not begun is not cancelled but told: its run begins with ``raise_if_cancelled``."""
        if self.done:
            return False
        if reason == "deleted":
            self.cancel_reason = reason
        elif self.settled:
            return False
        elif self.cancel_reason is None:
            self.cancel_reason = reason
        if self.settled:
            return False
        if self.started and self.task is not None:
            self.task.cancel()
        return True

    def raise_if_cancelled(self) -> None:
        """Raise ``CancelledError`` when the job was asked to stop before its task ran."""
        if self.cancel_reason is not None:
            raise asyncio.CancelledError

    async def wait(self, timeout: float | None = None) -> None:
        """Until the task ended (its end stored), or ``timeout`` passed; never cancels it."""
        if self.task is not None and not self.task.done():
            await asyncio.wait({self.task}, timeout=timeout)


Run = Callable[[BackgroundJob], Coroutine[Any, Any, None]]
"""What a background response does, given its job (whose log it writes and whose ``settle`` it
calls as it begins its end)."""


class BackgroundResponses:
    """The background responses this process runs, and the finished ones whose logs it still holds."""

    def __init__(
        self,
        *,
        retention: float = LOG_RETENTION,
        max_finished: int = MAX_FINISHED,
        max_finished_bytes: int = MAX_FINISHED_BYTES,
        max_bytes: int = LOG_MAX_BYTES,
        max_running: int = MAX_RUNNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retention = retention
        self.max_finished = max_finished
        self.max_finished_bytes = max_finished_bytes
        self.max_bytes = max_bytes
        self.max_running = max_running
        self._clock = clock
        self._running: dict[str, BackgroundJob] = {}
        self._finished: OrderedDict[str, BackgroundJob] = OrderedDict()
        """By the time they finished, oldest first."""
        self._finished_bytes = 0
        self._closed = False

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def closed(self) -> bool:
        """``close`` was called: no job starts any more."""
        return self._closed

    def check_room(self) -> None:
        """Raise what ``start`` would refuse a job with now: ``ShuttingDownError`` once closed,
        ``RateLimitError`` while ``max_running`` jobs run."""
        if self._closed:
            raise ShuttingDownError(
                "The gateway is shutting down; retry on another replica.", headers={"Retry-After": "1"}
            )
        if len(self._running) >= self.max_running:
            raise RateLimitError(
                f"This gateway process runs {self.max_running} background responses already; retry later.",
                code="too_many_background_responses",
                headers={"Retry-After": "1"},
            )

    def start(self, response_id: str, owner: str, run: Run) -> BackgroundJob:
        """Run ``run`` in a task of its own (``check_room`` first). The task is made from the
        caller's context, so it keeps the request's context variables (its API key: whom its
        tokens are charged to)."""
        self.check_room()
        self._expire()
        job = BackgroundJob(response_id, owner, EventLog(self.max_bytes))
        task = asyncio.get_running_loop().create_task(_run(job, run), name=f"background {response_id}")
        job.task = task
        self._running[response_id] = job
        task.add_done_callback(lambda _: self._ended(job))
        return job

    def _ended(self, job: BackgroundJob) -> None:
        job.log.close()
        job.finished_at = self._clock()
        self._running.pop(job.response_id, None)
        self._finished[job.response_id] = job
        self._finished_bytes += job.log.size
        self._expire()

    def get(self, response_id: str, owner: str) -> BackgroundJob | None:
        """The job, running or finished within ``retention``, if it is ``owner``'s."""
        self._expire()
        job = self._running.get(response_id) or self._finished.get(response_id)
        return job if job is not None and job.owner == owner else None

    async def cancel(self, job: BackgroundJob, timeout: float = CLOSE_WAIT) -> None:
        """Cancel the job (unless it is ending anyway) and wait until its end is stored."""
        job.cancel("cancelled")
        await job.wait(timeout)

    async def close(self, timeout: float = CLOSE_WAIT) -> None:
        """The gateway stops: every running job is cancelled and stores its end; none starts again."""
        self._closed = True
        jobs = list(self._running.values())
        for job in jobs:
            job.cancel("shutdown")
        tasks = {job.task for job in jobs if job.task is not None and not job.task.done()}
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=timeout)
            if late:
                logger.warning(
                    "%d background response(s) did not store their end before the gateway stopped", len(late)
                )

    def _expire(self) -> None:
        """Forget finished jobs past ``retention``, and the oldest beyond ``max_finished`` or
        ``max_finished_bytes``."""
        finished, horizon = self._finished, self._clock() - self.retention
        while finished:
            oldest = next(iter(finished.values()))
            over = len(finished) > self.max_finished or self._finished_bytes > self.max_finished_bytes
            if not over and (oldest.finished_at or 0.0) > horizon:
                break
            finished.popitem(last=False)
            self._finished_bytes -= oldest.log.size


async def _run(job: BackgroundJob, run: Run) -> None:
    job.started = True
    try:
        await run(job)
    except asyncio.CancelledError:
        pass  # the run stores its own end; a cancel it let through leaves nothing more to do
    except Exception:  # a bug: the response stays as last stored, the process goes on
        logger.exception("background response %s failed unexpectedly", job.response_id)
