"""The core's entry point: admission, the generation loop, and each request's outcome.

Knows nothing of FastAPI or OpenAI's wire format: planning hands it a ``GenerationPlan``, the HTTP
edge encodes what its ``Generation`` yields. ``draining`` (set by the server's SIGTERM drain)
refuses new work with a 503 so clients retry on another replica.
"""

from __future__ import annotations

import asyncio
import time

from gateway.backend.types import Backend
from gateway.core.admission import Admission, Ticket
from gateway.core.generate import Generation
from gateway.core.generation_plan import GenerationPlan
from gateway.core.outcome import RequestOutcome
from gateway.errors import GatewayError, QueueRefusedError, ShuttingDownError
from gateway.metrics import Metrics
from gateway.tracing import QUEUE


class CompletionService:
    """Admits planned requests and runs their generations on the backend."""

    def __init__(self, backend: Backend, admission: Admission, metrics: Metrics, *, log_requests: bool = False) -> None:
        self.backend = backend
        self.admission = admission
        self.metrics = metrics
        self.log_requests = log_requests
        self.draining = False

    def outcome(self, plan: GenerationPlan) -> RequestOutcome:
        """The request's bookkeeping; whoever ends the request finishes it (once)."""
        return RequestOutcome(plan, self.metrics, log=self.log_requests)

    def try_admit(self, plan: GenerationPlan, outcome: RequestOutcome) -> Ticket | None:
        """A slot at once when one is free (no task, no wait), else None: then ``admit``."""
        self._refuse_if_draining(outcome)
        ticket = self.admission.try_acquire(plan.model, plan.adapter, plan.claim)
        if ticket is not None:
            self._queued(plan, outcome, 0.0)
        return ticket

    async def admit(self, plan: GenerationPlan, outcome: RequestOutcome) -> Ticket:
        """Wait for a slot on the model (429 when the queue is full or the wait times out, 504
        when the request's deadline passes first)."""
        self._refuse_if_draining(outcome)
        remaining = None if plan.deadline is None else plan.deadline - time.monotonic()
        started = time.perf_counter()
        try:
            ticket = await self.admission.acquire(plan.model, plan.adapter, remaining, plan.claim)
        except (asyncio.CancelledError, GatewayError) as exc:
            if isinstance(exc, QueueRefusedError):
                self.metrics.shed(plan.model, plan.claim.band, exc.reason)
            outcome.fail(exc)
            raise
        finally:
            if outcome.trace is not None:
                outcome.trace.phase(QUEUE, started)
        self._queued(plan, outcome, time.perf_counter() - started)
        return ticket

    def _queued(self, plan: GenerationPlan, outcome: RequestOutcome, seconds: float) -> None:
        record = outcome.record
        record.queue_wait = seconds
        self.metrics.queued(plan.model, record.key, plan.claim.band, seconds)

    def generate(self, plan: GenerationPlan, ticket: Ticket, outcome: RequestOutcome) -> Generation:
        """Start the backend's work for an admitted request; the ``Generation`` owns the ticket."""
        return Generation(plan, self.backend, ticket, outcome)

    def _refuse_if_draining(self, outcome: RequestOutcome) -> None:
        if self.draining:
            error = ShuttingDownError(
                "The gateway is shutting down; retry on another replica.", headers={"Retry-After": "1"}
            )
            outcome.fail(error)
            raise error
