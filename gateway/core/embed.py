"""Embeddings in the core: admission, one backend call per input (all at once), answers in order.

Knows nothing of FastAPI or OpenAI's wire format: planning hands it an ``EmbeddingPlan``, the
edge encodes the ``EmbeddingResult``. A request takes one admission slot for all its inputs
(the per-model limit counts requests, as for generations; ``max_embedding_inputs`` bounds the
calls one request may open). The first input to fail cancels the others, so a refused request
leaves no work running in Triton.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.backend.types import Backend, Embedding, EmbeddingRequest
from gateway.core.admission import Ticket
from gateway.core.outcome import CLIENT_GONE
from gateway.core.schedule import Claim
from gateway.core.service import CompletionService
from gateway.errors import GatewayError, QueueRefusedError, ShuttingDownError
from gateway.keys.context import current_key
from gateway.logs import log_request
from gateway.metrics import RequestRecord

ENDPOINT = "embeddings"
"""The metrics' and the request log's ``endpoint`` label."""


@dataclass(frozen=True, slots=True)
class EmbeddingPlan:
    """One ``/v1/embeddings`` request, decided: a backend request per input, in input order."""

    requests: tuple[EmbeddingRequest, ...]
    request_id: str
    model_id: str
    """The id the client asked for, echoed back."""
    encoding_format: str
    """``float`` or ``base64``: how the edge writes each vector."""
    token_counts: tuple[int | None, ...] = ()
    """The gateway's own count per input, where it made one (token ids, truncation): usage when
    the backend reports none."""
    deadline: float | None = None
    claim: Claim = Claim()
    """Its band and flow for the scheduler (``plan/priority.py``)."""

    @property
    def model(self) -> str:
        return self.requests[0].model


@dataclass(frozen=True, slots=True)
class EmbeddingResult:
    """The vectors in input order, and the tokens read for all of them."""

    vectors: list[list[float]]
    prompt_tokens: int


async def run_embeddings(service: CompletionService, plan: EmbeddingPlan) -> EmbeddingResult:
    """Admit the request, embed every input concurrently, and count the request once."""
    record = RequestRecord(request_id=plan.request_id, endpoint=ENDPOINT, model=plan.model, adapter=None, stream=False)
    started_backend = False
    try:
        ticket = await _admit(service, plan)
        try:
            started_backend = True
            answers = await _embed_all(service.backend, plan.requests)
        finally:
            ticket.release()
    except BaseException as exc:
        _finish(service, record, _status(exc), exc if started_backend else None)
        raise
    counts = plan.token_counts or (None,) * len(answers)
    tokens = sum(
        answer.prompt_tokens if answer.prompt_tokens is not None else (counted or 0)
        for answer, counted in zip(answers, counts, strict=True)
    )
    record.prompt_tokens = tokens
    _finish(service, record, 200, None)
    return EmbeddingResult([answer.vector for answer in answers], tokens)


async def _admit(service: CompletionService, plan: EmbeddingPlan) -> Ticket:
    if service.draining:
        raise ShuttingDownError("The gateway is shutting down; retry on another replica.", headers={"Retry-After": "1"})
    ticket = service.admission.try_acquire(plan.model, None, plan.claim)
    if ticket is not None:
        return ticket
    remaining = None if plan.deadline is None else plan.deadline - time.monotonic()
    try:
        return await service.admission.acquire(plan.model, None, remaining, plan.claim)
    except QueueRefusedError as exc:
        service.metrics.shed(plan.model, plan.claim.band, exc.reason)
        raise


async def _embed_all(backend: Backend, requests: Sequence[EmbeddingRequest]) -> list[Embedding]:
    if len(requests) == 1:
        return [await backend.embed(requests[0])]
    tasks = [asyncio.ensure_future(backend.embed(request)) for request in requests]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _status(exc: BaseException) -> int:
    if isinstance(exc, CLIENT_GONE):
        return 499
    if isinstance(exc, GatewayError):
        return exc.status_code
    return 500


def _finish(service: CompletionService, record: RequestRecord, status: int, error: BaseException | None) -> None:
    record.status = status
    key = current_key.get()
    if key is not None:  # the key's name labels the metrics; its tokens (the inputs') are charged
        record.key = key.policy.name
        if key.meters_tokens and record.prompt_tokens:
            key.charge(record.prompt_tokens)
    if isinstance(error, GatewayError):
        record.error_type = error.error_type
    if status == 499:
        record.cancel_reason = "client_disconnect"
    service.metrics.finish(record)
    if service.log_requests:
        log_request(record, time.perf_counter())
