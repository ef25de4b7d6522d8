"""The core: a validated OpenAI request in, SSE frames or a response object out.

Knows nothing of FastAPI. Each request goes translate (``prepare_*``) → backend → assemble →
encode. The backend iterators are always closed in ``finally``, which is what cancels the Triton
call when the client leaves, a stop string ends every choice, or the deadline passes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from gateway.backend.types import Backend, GenerationChunk
from gateway.config import Settings
from gateway.core.admission import Admission, Ticket
from gateway.core.assemble import ChoiceEvent, RequestAssembler, Usage, coalesce
from gateway.core.logprobs import merge_completion_logprobs
from gateway.core.streams import Positioned, merge
from gateway.errors import (
    BackendTimeoutError,
    GatewayError,
    ShuttingDownError,
    error_body,
)
from gateway.logs import log_request
from gateway.metrics import Metrics, RequestRecord
from gateway.models.catalog import ModelCatalog
from gateway.openai.encode import (
    DONE_FRAME,
    ChunkEncoder,
    completion_object,
    error_frame,
)
from gateway.plan.prepare import GenerationPlan

logger = logging.getLogger(__name__)


def _run(prepared: GenerationPlan) -> RequestAssembler:
    return RequestAssembler(
        n=prepared.n,
        chat=prepared.chat,
        top_logprobs=prepared.logprobs,
        max_tokens=prepared.max_tokens,
        prompt_tokens=prepared.prompt_tokens,
        stops=prepared.stops,
        include_stop=prepared.include_stop,
        echo=prepared.echo,
    )


def _feed(run: RequestAssembler, positioned: Positioned[GenerationChunk]) -> tuple[list[ChoiceEvent], bool]:
    """Feed one prompt's batch of backend chunks until every choice is done: the events, and
    whether the last chunk fed was the backend's final one."""
    position, batch = positioned
    events: list[ChoiceEvent] = []
    final = False
    for chunk in batch:
        final = chunk.final
        events.extend(run.feed(position, chunk))
        if run.done:
            break
    return events, final


class CompletionService:
    """Turns OpenAI requests into backend generations and back."""

    def __init__(
        self, backend: Backend, catalog: ModelCatalog, settings: Settings, admission: Admission, metrics: Metrics
    ) -> None:
        self.backend = backend
        self.catalog = catalog
        self.settings = settings
        self.admission = admission
        self.metrics = metrics
        self.draining = False

    def record(self, plan: GenerationPlan) -> RequestRecord:
        return RequestRecord(
            request_id=plan.request_id,
            endpoint=plan.endpoint,
            model=plan.model,
            adapter=plan.adapter,
            stream=plan.stream,
        )

    # -- admit ------------------------------------------------------------------------------------

    def try_admit(self, prepared: GenerationPlan) -> Ticket | None:
        """A slot at once when one is free (no task, no wait), else None: then ``admit``."""
        self._refuse_if_draining()
        return self.admission.try_acquire(prepared.requests[0].model, prepared.adapter)

    def _refuse_if_draining(self) -> None:
        if self.draining:
            raise ShuttingDownError(
                "The gateway is shutting down; retry on another replica.", headers={"Retry-After": "1"}
            )

    async def admit(self, prepared: GenerationPlan, record: RequestRecord) -> Ticket:
        """Wait for a slot on the model (429 when the queue is full or the wait times out)."""
        self._refuse_if_draining()
        remaining = None if prepared.deadline is None else prepared.deadline - time.monotonic()
        try:
            return await self.admission.acquire(prepared.requests[0].model, prepared.adapter, remaining)
        except asyncio.CancelledError:
            self._finish(record, None, 499, "client_disconnect")
            raise
        except GatewayError as exc:
            self._finish(record, None, exc.status_code, "deadline" if isinstance(exc, BackendTimeoutError) else None)
            raise

    # -- generate, assemble, encode ---------------------------------------------------------------

    def _batches(self, prepared: GenerationPlan) -> AsyncIterator[Positioned[GenerationChunk]]:
        """Every prompt's chunks in batches, with the prompt's position."""
        return merge([self.backend.generate(r) for r in prepared.requests])

    def _encoder(self, prepared: GenerationPlan) -> ChunkEncoder:
        return ChunkEncoder(
            chat=prepared.chat,
            completion_id=prepared.completion_id,
            created=prepared.created,
            model=prepared.model_id,
            include_usage=prepared.include_usage,
            continuous_usage=prepared.continuous_usage,
        )

    def _finish(
        self,
        record: RequestRecord,
        run: RequestAssembler | None,
        status: int,
        cancel_reason: str | None,
        error: GatewayError | None = None,
    ) -> None:
        record.status = status
        record.cancel_reason = cancel_reason
        if error is not None:
            record.error_type = error.error_type
        if run is not None:
            usage = run.usage
            record.prompt_tokens, record.completion_tokens = usage.prompt_tokens, usage.completion_tokens
        self.metrics.finish(record)
        if self.settings.log_requests:
            log_request(record, time.perf_counter())

    @staticmethod
    def _error_outcome(exc: GatewayError) -> str | None:
        if isinstance(exc, BackendTimeoutError):
            return "deadline"
        if isinstance(exc, ShuttingDownError):
            return "shutdown"
        return None

    @staticmethod
    def _opening(prepared: GenerationPlan, encoder: ChunkEncoder, usage: Usage | None) -> bytes:
        """The role chunk of every choice, then (legacy ``echo``) each prompt's text."""
        choices = prepared.n * len(prepared.requests)
        opening = encoder.role_chunks(choices, usage)
        if prepared.echo:
            echoed = [ChoiceEvent(i, prepared.echo[i // prepared.n], None, None) for i in range(choices)]
            opening += encoder.events(echoed, usage)
        return opening

    async def stream(self, prepared: GenerationPlan, ticket: Ticket, record: RequestRecord) -> AsyncIterator[bytes]:
        """SSE frames. Errors before the first backend response propagate (so the edge can still
        answer with a status code); after that they become one error event that ends the stream.
        Backend responses that piled up while the client was being written to are sent as one
        coalesced chunk per choice (see ``Backend.generate``)."""
        encoder = self._encoder(prepared)
        run = _run(prepared)
        gap = self.metrics.inter_token_latency.labels(record.model)
        continuous = prepared.continuous_usage
        batches = self._batches(prepared)
        status, reason, error = 499, "client_disconnect", None
        final = False
        try:
            try:
                first = await anext(batches, None)
            except GatewayError as exc:
                status, reason, error = exc.status_code, self._error_outcome(exc), exc
                raise
            record.first_token = record.last_token = time.perf_counter()
            if first is None:
                final, events = True, run.close()
            else:
                events, final = _feed(run, first)
                events = coalesce(events)
            yield self._opening(prepared, encoder, run.usage if continuous else None)
            try:
                if events:
                    yield encoder.events(events, run.usage if continuous else None)
                if not run.done:
                    async for batch in batches:
                        now = time.perf_counter()
                        gap.observe(now - record.last_token)
                        record.last_token = now
                        events, final = _feed(run, batch)
                        events = coalesce(events)
                        if events:
                            yield encoder.events(events, run.usage if continuous else None)
                        if run.done:
                            break
                    else:
                        final = True
                        events = run.close()
                        if events:
                            yield encoder.events(events, run.usage if continuous else None)
            except GatewayError as exc:
                logger.warning("request failed mid-stream: %s", exc.message)
                status, reason, error = exc.status_code, self._error_outcome(exc), exc
                yield error_frame(error_body(exc))
                return
            if prepared.include_usage:
                yield encoder.usage_chunk(run.usage)
            status, reason = 200, (None if final or len(prepared.requests) > 1 else "stop_string")
            yield DONE_FRAME
        finally:
            await batches.aclose()  # type: ignore[attr-defined]
            ticket.release()
            self._finish(record, run, status, reason, error)

    async def complete(self, prepared: GenerationPlan, ticket: Ticket, record: RequestRecord) -> dict[str, Any]:
        """One response object with every choice's full text, finish reason and the usage."""
        run = _run(prepared)
        choices = prepared.n * len(prepared.requests)
        texts: list[list[str]] = [[] for _ in range(choices)]
        if prepared.echo:
            for index in range(choices):
                texts[index].append(prepared.echo[index // prepared.n])
        logprobs: list[list[Any]] = [[] for _ in range(choices)]
        batches = self._batches(prepared)
        status, reason, error = 499, "client_disconnect", None
        final = False

        def collect(events: list[ChoiceEvent]) -> None:
            for event in events:
                texts[event.index].append(event.text)
                if event.logprobs is not None:
                    logprobs[event.index].append(event.logprobs)

        try:
            async for batch in batches:
                if record.first_token is None:
                    record.first_token = time.perf_counter()
                events, final = _feed(run, batch)
                collect(events)
                if run.done:
                    break
            else:
                final = True
                collect(run.close())
            status, reason = 200, (None if final or len(prepared.requests) > 1 else "stop_string")
        except GatewayError as exc:
            status, reason, error = exc.status_code, self._error_outcome(exc), exc
            raise
        finally:
            await batches.aclose()  # type: ignore[attr-defined]
            ticket.release()
            self._finish(record, run, status, reason, error)
        return completion_object(
            chat=prepared.chat,
            completion_id=prepared.completion_id,
            created=prepared.created,
            model=prepared.model_id,
            texts=["".join(parts) for parts in texts],
            finish_reasons=run.finish_reasons,
            logprobs=None if prepared.logprobs is None else [self._join_logprobs(prepared.chat, p) for p in logprobs],
            usage=run.usage,
        )

    @staticmethod
    def _join_logprobs(chat: bool, parts: list[Any]) -> Any:
        if chat:
            return {"content": [item for part in parts for item in part["content"]]}
        return merge_completion_logprobs(parts)
