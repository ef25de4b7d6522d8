"""Request bookkeeping: one ``RequestOutcome`` per request, finished exactly once.

A request can end in many places (a 429 in the queue, the client leaving while queued, an error
before or after the first token, a stop string, the deadline, the shutdown drain, a normal end),
and each must be counted once, with the right status and cancel reason, in the metrics and the
JSON request line. So every exit path calls ``succeed`` or ``fail`` on the same object; only the
first call counts. Per backend batch only ``responded`` runs (timestamps, the inter-token gap).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Protocol

from gateway.core.assemble import Usage
from gateway.core.generation_plan import GenerationPlan
from gateway.errors import BackendTimeoutError, GatewayError, ShuttingDownError
from gateway.keys.context import current_key
from gateway.logs import log_request
from gateway.metrics import GapTally, Metrics, RequestRecord
from gateway.tracing import FIRST_TOKEN, LAST_TOKEN, current_trace, response_attributes

CLIENT_GONE: tuple[type[BaseException], ...] = (asyncio.CancelledError, GeneratorExit)
"""How a client's disconnect reaches the core: the request's task is cancelled (a non-streaming
request, or a stream awaiting Triton), or the stream's generation is closed (``aclose``) while it
waits for the edge to write."""


class UsageSource(Protocol):
    """What a running request has spent so far (``core.assemble.RequestAssembler``)."""

    @property
    def usage(self) -> Usage: ...


CHARGE_INTERVAL = 0.5
"""Seconds between charges of a running request's tokens to its key's token limit."""


class RequestOutcome:
    """Status, cancel reason, error type, usage and timings of one request."""

    __slots__ = (
        "record",
        "finished",
        "backend_started",
        "trace",
        "_plan",
        "_metrics",
        "_gap",
        "_gaps",
        "_log",
        "_key",
        "_metered",
        "_charged",
        "_charged_at",
    )

    def __init__(self, plan: GenerationPlan, metrics: Metrics, *, log: bool) -> None:
        self.record = RequestRecord(
            request_id=plan.request_id,
            endpoint=plan.endpoint,
            model=plan.model,
            adapter=plan.adapter,
            stream=plan.stream,
            placement=plan.requests[0].placement if plan.requests else None,
            priority=plan.claim.band,
        )
        self._key = current_key.get()
        """The request's API key: its name labels the metrics, and its tokens are charged to it."""
        self._metered = self._key is not None and self._key.meters_tokens
        """Charge the key's tokens while the request runs (a key with ``tpm``)."""
        self._charged = 0
        self._charged_at = self.record.started
        if self._key is not None:
            self.record.key = self._key.policy.name
        self.finished = False
        self.backend_started = False
        """Set once the backend was asked to generate: a shutdown then cancels real work."""
        self._metrics = metrics
        self._gap: GapTally | None = None
        self._gaps = plan.stream
        """Inter-token gaps are what a stream's client sees; a non-streaming client sees none."""
        self._log = log
        self.trace = trace = current_trace.get()
        """The request's trace (None: tracing is off): told the plan now, the outcome at the end."""
        self._plan = plan
        if trace is not None and plan.requests:
            first = plan.requests[0]
            prompts = [request.prompt for request in plan.requests[:: plan.n]] if trace.content else ()
            trace.planned(plan.endpoint, plan.model_id, first.sampling, plan.n, prompts)
            trace.span.set_attribute("gateway.priority", plan.claim.band)
            trace.span.set_attribute("gateway.flow", plan.claim.flow)

    def responded(self, run: UsageSource | None = None) -> None:
        """A batch of backend responses arrived: the first token's time, then each gap (streams).
        ``run``: its usage so far is charged to a key with a token limit every
        ``CHARGE_INTERVAL`` (a long stream spends its key's budget as it goes, not at its end)."""
        now = time.perf_counter()
        if self._metered and run is not None and now - self._charged_at >= CHARGE_INTERVAL:
            self._charge(run.usage.total_tokens)
            self._charged_at = now
        record = self.record
        last = record.last_token
        if last is None:
            record.first_token = now
        elif self._gaps:
            gaps = self._gap
            if gaps is None:
                gaps = self._gap = self._metrics.gap_tally(record.model)
            gaps.add(now - last)
        record.last_token = now

    def succeed(self, usage: Usage, *, stopped_early: bool, finish_reasons: Sequence[str | None] = ()) -> None:
        """A 200. ``stopped_early``: the gateway ended the backend's work (every choice hit a stop
        string) before the backend's final response. ``finish_reasons``: per choice, for the trace."""
        self._finish(200, "stop_string" if stopped_early else None, None, usage, finish_reasons)

    def abandon(self, usage: Usage | None = None) -> None:
        """The client left (nginx's 499) before the request was done."""
        self._finish(499, "client_disconnect", None, usage)

    def fail(self, exc: BaseException, usage: Usage | None = None) -> None:
        """The request ended with ``exc``: the client left, a ``GatewayError``, or a bug (500)."""
        if isinstance(exc, CLIENT_GONE):
            self.abandon(usage)
        elif isinstance(exc, GatewayError):
            # Before the backend was asked (errors in the queue) nothing in Triton failed: a status,
            # but no error type for ``gateway_backend_errors``.
            error_type = exc.error_type if self.backend_started else None
            self._finish(exc.status_code, self._reason(exc), error_type, usage)
        else:
            self._finish(500, None, None, usage)

    def _reason(self, exc: GatewayError) -> str | None:
        if isinstance(exc, BackendTimeoutError):
            return "deadline"
        if isinstance(exc, ShuttingDownError) and self.backend_started:
            return "shutdown"
        return None

    def _charge(self, total: int) -> None:
        """Charge the key the tokens spent since the last charge."""
        assert self._key is not None
        if total > self._charged:
            self._key.charge(total - self._charged)
            self._charged = total

    def _finish(
        self,
        status: int,
        cancel_reason: str | None,
        error_type: str | None,
        usage: Usage | None,
        finish_reasons: Sequence[str | None] = (),
    ) -> None:
        if self.finished:
            return
        self.finished = True
        record = self.record
        record.status = status
        record.cancel_reason = cancel_reason
        record.error_type = error_type
        if usage is not None:
            record.prompt_tokens, record.completion_tokens = usage.prompt_tokens, usage.completion_tokens
        if self._gap is not None:
            self._gap.flush()
        if self._metered:
            self._charge(record.prompt_tokens + record.completion_tokens)
        self._metrics.finish(record)
        if self.trace is not None:
            self._traced(finish_reasons)
        if self._log:
            log_request(record, time.perf_counter())

    def _traced(self, finish_reasons: Sequence[str | None]) -> None:
        """The span's response attributes and the first and last token's events: all at the end,
        from what the record kept, so tracing adds nothing per token."""
        trace, record, plan = self.trace, self.record, self._plan
        assert trace is not None
        if record.first_token is not None:
            trace.event(FIRST_TOKEN, record.first_token)
        if record.last_token is not None:
            trace.event(LAST_TOKEN, record.last_token)
        trace.span.set_attributes(
            response_attributes(
                plan.completion_id, plan.model_id, record.prompt_tokens, record.completion_tokens, finish_reasons
            )
        )
        if record.cancel_reason is not None:
            trace.span.set_attribute("gateway.cancel_reason", record.cancel_reason)
