"""Answering a planned request: admit, generate, then SSE frames or one JSON object.

Every generating endpoint goes through ``respond``: chat and legacy completions with their chunks
(``http.completion_answer``), the Responses API with its events (``http.responses_answer``),
Anthropic's Messages API with its events (``http.messages_answer``); only the ``Answer``, the
encoding of the same generation, differs. (Embeddings generate nothing: ``http.routes.embeddings``
answers them itself.) The client leaving cancels every phase
(the queue, the wait for the first response, a non-streaming generation), and the request's
outcome is finished whatever happens: by the generation itself in the usual cases, and here for
anything that ends the request before or around it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from gateway.config import Settings
from gateway.core.admission import Ticket
from gateway.core.generate import Generation
from gateway.core.generation_plan import GenerationPlan
from gateway.core.outcome import RequestOutcome
from gateway.core.service import CompletionService
from gateway.errors import GatewayError
from gateway.http.completion_answer import CompletionAnswer
from gateway.http.deps import PRIORITY_HEADER
from gateway.http.disconnect import ClientWatch
from gateway.http.errors import ClientDisconnected
from gateway.http.json_response import JSONBytesResponse
from gateway.http.rejections import mark_counted_by_outcome
from gateway.http.sse import sse_response
from gateway.http.streaming import FirstStep, StreamEncoding, StreamFrames


class Answer(Protocol):
    """How an admitted generation is answered: its stream's encoding, or one JSON object."""

    def encoding(self, generation: Generation) -> StreamEncoding:
        """What the stream's frames say (``http.streaming.StreamFrames`` decides when)."""
        ...

    async def complete(self, generation: Generation) -> dict[str, Any]:
        """The whole generation as one object (closing the generation, whatever happens)."""
        ...


async def respond(
    request: Request,
    service: CompletionService,
    plan: GenerationPlan,
    settings: Settings,
    answer: Answer | None = None,
) -> Response:
    """Admit → stream (SSE) or complete (JSON); ``answer`` defaults to chat's or completions'.

    The client leaving cancels this task wherever it waits (``ClientWatch``); that becomes
    ``ClientDisconnected``, a 499 nobody reads. The watch goes to the SSE response with the
    stream, or stops once the JSON is ready."""
    answer = answer or CompletionAnswer(plan)
    outcome = service.outcome(plan)
    mark_counted_by_outcome(request.scope)
    ticket: Ticket | None = None
    generation: Generation | None = None
    watch: ClientWatch | None = None
    try:
        ticket = service.try_admit(plan, outcome)
        if ticket is None:
            watch = ClientWatch(request.receive)
            ticket = await service.admit(plan, outcome)
        generation = service.generate(plan, ticket, outcome)
        if plan.stream:
            # The first step's task is made before the watch's, so the loop runs it first: the
            # request leaves for Triton before the watch starts reading.
            step = FirstStep(generation)
            watch = watch or ClientWatch(request.receive)
            first = await step.wait(settings.first_response_wait)
            frames = StreamFrames(answer.encoding(generation), generation, first)
            response: Response = _stream_response(frames, settings, watch, plan)
        else:
            watch = watch or ClientWatch(request.receive)
            response = JSONBytesResponse(await answer.complete(generation), headers=plan_headers(plan))
            watch.stop()
        watch = None  # the SSE response's now, or stopped
        return response
    except BaseException as exc:
        await _unwind(exc, plan, outcome, watch, ticket, generation)
        raise


def _stream_response(frames: StreamFrames, settings: Settings, watch: ClientWatch, plan: GenerationPlan) -> Response:
    return sse_response(
        frames,
        ping_interval=settings.sse_ping_interval,
        coalesce_interval=settings.stream_coalesce_interval,
        watch=watch,
        headers=plan_headers(plan),
    )


async def _unwind(
    exc: BaseException,
    plan: GenerationPlan,
    outcome: RequestOutcome,
    watch: ClientWatch | None,
    ticket: Ticket | None,
    generation: Generation | None,
) -> None:
    """The request ends with ``exc`` before its response was made: its watch stopped, its outcome
    finished, its generation closed (or its slot given back). Raises ``ClientDisconnected`` when
    ``exc`` is the watch's own cancel (the client left); else the caller raises ``exc``, with the
    replica's headers on it."""
    gone = False
    if watch is not None:
        watch.stop()
        gone = isinstance(exc, asyncio.CancelledError) and watch.taken_back()
    # No-ops when the generation already ended the request (its usual way to end).
    if gone:
        outcome.abandon()
    else:
        outcome.fail(exc)
    if generation is not None:
        await generation.aclose()
    elif ticket is not None:
        ticket.release()
    if gone:
        raise ClientDisconnected() from None
    if isinstance(exc, GatewayError):  # the band it was refused in; after a retry, the replica that failed last
        exc.headers = {**exc.headers, **plan_headers(plan)}


REPLICA_HEADER = "x-gateway-replica"
ROUTE_HEADER = "x-gateway-route"


def plan_headers(plan: GenerationPlan) -> dict[str, str]:
    """The band the request ran in (``PRIORITY_HEADER``: the key's policy may have lowered what
    it asked for), and which Triton replica served it and why (its first choice's, when ``n`` > 1
    or several prompts spread them): for operators tracing a slow answer, and for clients
    checking that their session key holds."""
    headers = {PRIORITY_HEADER: str(plan.claim.band)}
    placement = plan.requests[0].placement if plan.requests else None
    if placement is not None and placement.replica is not None:
        headers[REPLICA_HEADER] = placement.replica
        headers[ROUTE_HEADER] = placement.route or ""
    return headers
