"""Background responses (``background: true``): started, run, streamed again, cancelled.

The POST plans the request as any other (every 4xx is still the POST's), stores the Response
object ``queued`` and answers it at once (or, with ``stream``, the stream of its events), while a
task of the gateway's (``jobs.background.BackgroundResponses``) runs it: the client leaving
changes nothing. The task runs what ``http.answer.respond`` runs for a stream, with no client:
admission, the generation, ``http.streaming.StreamFrames`` with the Responses encoding; its frames
go to the response's event log instead of a socket, and every change of status goes to the store
(``queued`` → ``in_progress`` once admitted → ``completed``, ``incomplete``, ``failed``, or
``cancelled``), so a GET on any replica sharing the store sees it.

It runs in the jobs' band (``settings.jobs_priority``, planned in ``plan.responses``). At or above
``shed_priority`` a request of that band is refused at once whenever every slot is busy; a
background response is not refused but asks again, after 0.1 s, doubling to 2 s, until a slot is
free: it uses idle capacity and never fails for the lack of it. Below ``shed_priority`` it waits in
the queue like any request, and asks again if the queue refuses it.

Its events are held by the process that runs it (``jobs.background``, for ``LOG_RETENTION`` after
it ends): ``GET /v1/responses/{id}?stream=true`` on another process answers 404
``response_events_not_held``, and the object itself (a GET without ``stream``) is there for every
process. ``POST /v1/responses/{id}/cancel`` stops it where it runs (its Triton call is cancelled)
and answers the ``cancelled`` object; on another process it marks the stored object ``cancelled``,
which the running process notices within ``CANCEL_CHECK_INTERVAL`` (a mark that races the
response's own end may lose to it: the end is stored then). A process that stops cleanly stores
its running responses ``failed`` (the gateway stopped); a process that is killed leaves them as
last stored (``queued`` or ``in_progress``), and nothing runs them again; but it held a lease on
each in the store (``jobs``), renewed while it ran, so once the lease is past a GET on any process
stores and answers the response ``failed`` (``settled``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.core.admission import Ticket
from gateway.core.assemble import Usage
from gateway.core.generate import Generation
from gateway.core.outcome import RequestOutcome
from gateway.errors import (
    BackendTimeoutError,
    GatewayError,
    InvalidRequestError,
    QueueRefusedError,
    ResponseNotFoundError,
    ShuttingDownError,
    error_body,
)
from gateway.http.answer import plan_headers
from gateway.http.deps import Components
from gateway.http.errors import error_event
from gateway.http.json_response import JSONBytesResponse
from gateway.http.rejections import mark_counted_by_outcome
from gateway.http.responses_answer import ResponsesAnswer, ResponsesEncoding
from gateway.http.sse import sse_response
from gateway.http.streaming import FirstStep, StreamFrames
from gateway.jobs.background import BackgroundJob, CancelReason, EventsDroppedError, LogReader
from gateway.plan.responses import ResponsesPlan
from gateway.store.base import StoredResponse
from gateway.tracing import current_trace

logger = logging.getLogger(__name__)

BACKOFF_FIRST = 0.1
"""Seconds before a background response refused a slot asks again; doubled each time."""
BACKOFF_MAX = 2.0
CANCEL_CHECK_INTERVAL = 2.0
"""Seconds between a running response's looks at the store for a cancel (or delete) made on
another process."""
NO_USAGE = Usage(0, 0)
STOPPED = "The gateway stopped before this background response finished; create it again."
RUNNING = ("queued", "in_progress")
"""The statuses of a response that has not ended."""


async def start_background(request: Request, components: Components, plan: ResponsesPlan, *, stream: bool) -> Response:
    """Store the response ``queued``, start its task, and answer the object (or, ``stream``, its
    events: replayed from its log, so the client leaving stops only the reading)."""
    if components.service.draining:
        raise ShuttingDownError("The gateway is shutting down; retry on another replica.", headers={"Retry-After": "1"})
    components.background.check_room()  # refused before it is stored
    answer = ResponsesAnswer(plan, components.store, components.seal)
    run = BackgroundRun(plan, answer, components)
    queued = run.encoder.snapshot("queued")
    if components.jobs is not None:  # held before it is stored: a reader never finds it orphaned
        await components.jobs.hold_background(plan.response_id)
    await answer.put(queued)  # before the id goes out: a GET on any replica finds it at once
    try:
        job = components.background.start(plan.response_id, plan.owner, run)
    except GatewayError:  # closed (or full) while it was being stored: refused, so never stored
        if components.store is not None:
            await components.store.delete(plan.response_id, plan.owner)
        raise
    job.result = queued
    job.log.append(run.encoder.queued())
    mark_counted_by_outcome(request.scope)  # its task's outcome counts it
    components.metrics.background_response("queued")
    headers = plan_headers(plan.generation)
    if stream:
        return _events_response(job.log.reader(), components, headers)
    return JSONBytesResponse(queued, headers=headers)


class BackgroundRun:
    """What one background response's task does (a ``jobs.background.Run``)."""

    __slots__ = ("plan", "answer", "encoder", "components")

    def __init__(self, plan: ResponsesPlan, answer: ResponsesAnswer, components: Components) -> None:
        self.plan = plan
        self.answer = answer
        self.components = components
        self.encoder = answer.encoder()

    async def __call__(self, job: BackgroundJob) -> None:
        current_trace.set(None)  # the POST's span ended with its answer
        watch: asyncio.Task[None] | None = None
        held = asyncio.create_task(self._keep_held())
        generation: Generation | None = None
        frames: StreamFrames | None = None
        try:
            job.raise_if_cancelled()
            ticket, outcome = await self._admit()
            generation = self.components.service.generate(self.plan.generation, ticket, outcome)
            if not await self._still_wanted(job):
                raise asyncio.CancelledError
            await self.keep(job, self.encoder.snapshot("in_progress"))
            watch = asyncio.create_task(self._watch_store(job))
            first = await FirstStep(generation).wait(0.0)
            frames = StreamFrames(BackgroundEncoding(self, job, generation), generation, first)
            async for chunk in frames:
                job.log.append(chunk)
        except asyncio.CancelledError:
            await self._stop(job, frames, generation)
        except GatewayError as exc:  # refused before its stream (shutting down, its deadline), or failed at once
            job.settle()
            if generation is not None:
                await generation.aclose()
            usage = generation.usage if generation is not None else NO_USAGE
            events, response = self.encoder.failed(error_body(exc)["error"], usage)
            job.log.append(events)
            await self.keep(job, response)
        finally:
            if watch is not None:
                watch.cancel()
            held.cancel()
            await self._release()

    async def _admit(self) -> tuple[Ticket, RequestOutcome]:
        """A slot, asked for again after a backoff whenever none is given; raises what ends the
        response (shutting down, its deadline passed) and ``CancelledError``."""
        plan, service = self.plan.generation, self.components.service
        queues = plan.claim.band < self.components.settings.shed_priority
        outcome = service.outcome(plan)
        delay = BACKOFF_FIRST
        while True:
            ticket: Ticket | None = None
            try:
                ticket = service.try_admit(plan, outcome)
                if ticket is None and queues:
                    ticket = await service.admit(plan, outcome)
            except QueueRefusedError:  # the queue is full, or the wait timed out: that outcome is finished
                outcome = service.outcome(plan)
            except asyncio.CancelledError:
                outcome.fail(asyncio.CancelledError())  # a no-op where admission finished it
                raise
            if ticket is not None:
                return ticket, outcome
            if plan.deadline is not None and time.monotonic() + delay >= plan.deadline:
                error = BackendTimeoutError("the request's deadline passed while it waited for a slot")
                outcome.fail(error)
                raise error
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                outcome.fail(asyncio.CancelledError())
                raise
            delay = min(delay * 2, BACKOFF_MAX)

    async def _stop(self, job: BackgroundJob, frames: StreamFrames | None, generation: Generation | None) -> None:
        """Cancelled: the Triton call closed, then the end stored: ``cancelled`` for its owner's
        cancel, ``failed`` when the gateway stops, nothing once it was deleted."""
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()  # the cancel was for the work; the end must still be stored
        reason = job.cancel_reason or "shutdown"
        job.settle()
        if frames is not None:
            await frames.aclose()
        elif generation is not None:
            await generation.aclose()
        usage = generation.usage if generation is not None else NO_USAGE
        if reason == "deleted":
            return
        if reason == "cancelled":
            await self.keep(job, self.encoder.cancelled(usage))
            return
        events, response = self.encoder.failed(error_body(ShuttingDownError(STOPPED))["error"], usage)
        job.log.append(events)
        await self.keep(job, response)

    async def keep(self, job: BackgroundJob, response: dict[str, Any]) -> None:
        """Store ``response`` as the job's latest object (a store that fails is logged: it runs on),
        unless the response was deleted meanwhile."""
        if job.cancel_reason == "deleted":
            return
        job.result = response
        self.components.metrics.background_response(response["status"])
        await self.answer.save(response)

    async def _still_wanted(self, job: BackgroundJob) -> bool:
        """Whether its stored object is still there and not marked ``cancelled`` by another process
        (looked at once admitted, before ``in_progress`` would overwrite a mark)."""
        reason = await self._stopped_elsewhere()
        if reason is not None:
            job.cancel_reason = job.cancel_reason or reason
        return reason is None

    async def _keep_held(self) -> None:
        """Renew this process's lease on the response while it runs (queued included)."""
        jobs = self.components.jobs
        if jobs is None:
            return
        while True:
            await asyncio.sleep(jobs.renew_every)
            try:
                await jobs.hold_background(self.plan.response_id)
            except GatewayError as exc:  # the store: the next renewal may reach it
                logger.warning("background response %s: renewing its lease failed: %s", self.plan.response_id, exc)

    async def _release(self) -> None:
        """After its end is stored: the lease goes (a store that fails leaves it to run out)."""
        jobs = self.components.jobs
        if jobs is None:
            return
        try:
            await jobs.release_background(self.plan.response_id)
        except GatewayError as exc:
            logger.warning("background response %s: releasing its lease failed: %s", self.plan.response_id, exc)

    async def _watch_store(self, job: BackgroundJob) -> None:
        """Every ``CANCEL_CHECK_INTERVAL``: a cancel mark or a delete from another process stops it."""
        while True:
            await asyncio.sleep(CANCEL_CHECK_INTERVAL)
            reason = await self._stopped_elsewhere()
            if reason is not None:
                job.cancel(reason)

    async def _stopped_elsewhere(self) -> CancelReason | None:
        """``deleted`` when the stored object is gone, ``cancelled`` when another process marked it
        so; None otherwise (also when the store could not be read: it runs on)."""
        store = self.answer.store
        if store is None:
            return None
        try:
            stored = await store.get(self.plan.response_id, self.plan.owner)
        except Exception:
            logger.warning("could not read background response %s", self.plan.response_id, exc_info=True)
            return None
        if stored is None:
            return "deleted"
        return "cancelled" if stored.response.get("status") == "cancelled" else None


class BackgroundEncoding(ResponsesEncoding):
    """A background response's stream encoding: its opening says only ``response.in_progress``
    (``response.created`` and ``response.queued`` went out at its POST), its end is settled
    (too late to cancel) before it is stored, and a cut-off stores nothing: ``BackgroundRun``
    stores the end of a cancelled response itself."""

    __slots__ = ("_run", "_job")

    def __init__(self, run: BackgroundRun, job: BackgroundJob, generation: Generation) -> None:
        super().__init__(run.answer, generation, run.encoder)
        self._run = run
        self._job = job

    async def ended(self, response: dict[str, Any]) -> None:
        self._job.settle()
        await self._run.keep(self._job, response)

    async def cut_off(self) -> None:
        pass


class ReplayFrames:
    """A log reader as an SSE response's frames: a reader that fell behind the log's bound gets
    an error event, and the stream ends."""

    __slots__ = ("_reader", "ended")

    def __init__(self, reader: LogReader) -> None:
        self._reader = reader
        self.ended = False

    def __aiter__(self) -> ReplayFrames:
        return self

    async def __anext__(self) -> bytes:
        if self.ended:
            raise StopAsyncIteration
        try:
            frame = await self._reader.__anext__()
        except EventsDroppedError as exc:
            self.ended = True
            return error_event(_dropped(exc))
        self.ended = self._reader.ended
        return frame

    async def aclose(self) -> None:
        self.ended = True
        await self._reader.aclose()


def _events_response(reader: LogReader, components: Components, headers: dict[str, str] | None = None) -> Response:
    settings = components.settings
    return sse_response(
        ReplayFrames(reader),
        ping_interval=settings.sse_ping_interval,
        coalesce_interval=settings.stream_coalesce_interval,
        headers=headers,
    )


def stream_background(components: Components, stored: StoredResponse, after: int) -> Response:
    """``GET /v1/responses/{id}?stream=true``: the events after sequence number ``after`` (-1:
    all of them), then the live ones until the response ends."""
    if not stored.response.get("background"):
        raise InvalidRequestError(
            "streaming a stored response again is supported for background responses only", param="stream"
        )
    job = components.background.get(stored.id, stored.owner)
    if job is None:
        raise ResponseNotFoundError(
            f"The events of response '{stored.id}' are not held by this gateway process: the process that runs "
            f"a background response holds them, for {components.background.retention:g} s after it ends. "
            "Retrieve it without stream for its object.",
            param="response_id",
            code="response_events_not_held",
        )
    try:
        reader = job.log.reader(after)
    except EventsDroppedError as exc:
        raise _dropped(exc) from None
    return _events_response(reader, components)


def _dropped(exc: EventsDroppedError) -> ResponseNotFoundError:
    return ResponseNotFoundError(
        f"This response's events before sequence number {exc.held_from} are no longer held (a response's "
        "events are bounded in size); stream it with a later starting_after, or retrieve its object.",
        param="starting_after",
        code="response_events_dropped",
    )


async def cancel_background(components: Components, stored: StoredResponse) -> dict[str, Any]:
    """``POST /v1/responses/{id}/cancel``: the object once cancelled (a finished one unchanged)."""
    if not stored.response.get("background"):
        raise InvalidRequestError("Only background responses can be cancelled.", param="response_id")
    job = components.background.get(stored.id, stored.owner)
    if job is not None:
        await components.background.cancel(job)
        return job.result or stored.response
    if stored.response.get("status") not in RUNNING or components.store is None:
        return stored.response
    # Another process runs it (or ran it, and was killed): marked, for that process to notice.
    marked = {**stored.response, "status": "cancelled"}
    await components.store.put(dataclasses.replace(stored, response=marked))
    return marked


ORPHANED = (
    "The gateway process running this background response stopped before it finished (it was killed, "
    "or lost the store); create it again."
)


async def settled(components: Components, stored: StoredResponse) -> StoredResponse:
    """``stored`` as it stands: a background response still ``queued`` or ``in_progress`` whose
    process no longer holds its lease (killed, or cut off from the store past the lease) is
    stored ``failed`` here, so that nobody polls it forever."""
    jobs, store = components.jobs, components.store
    response = stored.response
    if not response.get("background") or response.get("status") not in RUNNING or jobs is None or store is None:
        return stored
    if components.background.get(stored.id, stored.owner) is not None or await jobs.background_alive(stored.id):
        return stored
    error = {"code": "server_error", "message": ORPHANED}
    failed = dataclasses.replace(stored, response={**response, "status": "failed", "error": error})
    await store.put(failed)
    components.metrics.background_response("failed")
    return failed


def forget_background(components: Components, response_id: str, owner: str) -> None:
    """A deleted response's task stops (and stores nothing more)."""
    job = components.background.get(response_id, owner)
    if job is not None:
        job.cancel("deleted")
