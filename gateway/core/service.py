"""The core: a validated OpenAI request in, SSE frames or a response object out.

Knows nothing of FastAPI. Each request goes translate (``prepare_*``) → backend → assemble →
encode. The backend iterators are always closed in ``finally``, which is what cancels the Triton
call when the client leaves, a stop string ends every choice, or the deadline passes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gateway.backend.types import Backend, GenerationChunk, GenerationRequest
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
from gateway.models.catalog import ModelCatalog, ServedModel
from gateway.models.resolve import ResolvedModel, resolve_model
from gateway.openai.encode import (
    DONE_FRAME,
    ChunkEncoder,
    completion_object,
    error_frame,
)
from gateway.openai.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    SamplingFields,
)
from gateway.plan.chat import chat_max_tokens, render_chat_prompt
from gateway.plan.completions import check_completion_options, completion_prompts
from gateway.plan.limits import (
    check_chat_limits,
    check_prompt_limits,
    check_sampling_limits,
)
from gateway.plan.sampling import resolve_max_tokens, stop_list, to_generation_request

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PreparedGeneration:
    """Everything decided before the backend is called: one backend request per prompt."""

    requests: tuple[GenerationRequest, ...]
    chat: bool
    model_id: str
    completion_id: str
    created: int
    n: int
    stops: tuple[str, ...]
    include_stop: bool
    max_tokens: tuple[int, ...]
    include_usage: bool
    continuous_usage: bool
    logprobs: int | None = None
    """Top-k alternatives asked for (0: only the sampled token); None: no logprobs."""
    echo: tuple[str, ...] | None = None
    """Legacy completions with ``echo``: each prompt's text, shown before its completion."""
    prompt_tokens: tuple[int | None, ...] = ()
    """The gateway's own count per prompt: usage when the backend reports none (TensorRT-LLM)."""
    record: RequestRecord | None = None
    deadline: float | None = None
    """``time.monotonic()`` by which the whole request must be done."""
    adapter: str | None = None


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What the HTTP edge knows about a request that the core needs."""

    request_id: str
    deadline: float | None = None


def _run(prepared: PreparedGeneration) -> RequestAssembler:
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


def count_prompt_tokens(model: ServedModel, prompt: str) -> int | None:
    if model.tokenizer is None:
        return None
    return len(model.tokenizer.encode(prompt).ids)


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

    # -- translate --------------------------------------------------------------------------------

    async def _resolve(self, model_id: str) -> ResolvedModel:
        return resolve_model(model_id, await self.catalog.models(), self.settings.lora_separator)

    def _budget(self, requested: int | None, resolved: ResolvedModel, prompt: str) -> tuple[int, int | None]:
        """``max_tokens`` to send, and the prompt's token count (None without a tokenizer)."""
        settings = self.settings
        cap = settings.limits_for(resolved.model.name)[2]
        check_prompt_limits(prompt, requested, max_prompt_chars=settings.max_prompt_chars, max_tokens_cap=cap)
        prompt_tokens = count_prompt_tokens(resolved.model, prompt)
        max_tokens = resolve_max_tokens(
            requested,
            prompt_tokens=prompt_tokens,
            max_model_len=resolved.model.max_model_len,
            fallback=settings.default_max_tokens,
        )
        return (min(max_tokens, cap) if cap is not None else max_tokens), prompt_tokens

    def _prepared(
        self,
        body: SamplingFields,
        context: RequestContext,
        resolved: ResolvedModel,
        requests: list[GenerationRequest],
        max_tokens: list[int],
        **extra: Any,
    ) -> PreparedGeneration:
        options = body.stream_options
        chat = isinstance(body, ChatCompletionRequest)
        record = RequestRecord(
            request_id=context.request_id,
            endpoint="chat" if chat else "completions",
            model=resolved.model.name,
            adapter=resolved.adapter,
            stream=body.stream,
        )
        return PreparedGeneration(
            requests=tuple(requests),
            chat=chat,
            model_id=body.model,
            completion_id=f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            created=int(time.time()),
            n=body.n,
            stops=tuple(stop_list(body.stop)),
            include_stop=body.include_stop_str_in_output,
            max_tokens=tuple(max_tokens),
            include_usage=bool(options and options.include_usage),
            continuous_usage=bool(options and options.continuous_usage_stats),
            record=record,
            deadline=context.deadline,
            adapter=resolved.adapter,
            **extra,
        )

    async def prepare_chat(self, body: ChatCompletionRequest, context: RequestContext) -> PreparedGeneration:
        check_chat_limits(body, max_n=self.settings.max_n, max_messages=self.settings.max_messages)
        resolved = await self._resolve(body.model)
        prompt = render_chat_prompt(body, resolved)
        max_tokens, prompt_tokens = self._budget(chat_max_tokens(body), resolved, prompt)
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        generation = to_generation_request(
            body,
            resolved,
            request_id=context.request_id,
            prompt=prompt,
            max_tokens=max_tokens,
            logprobs=logprobs,
            deadline=context.deadline,
        )
        return self._prepared(
            body, context, resolved, [generation], [max_tokens], logprobs=logprobs, prompt_tokens=(prompt_tokens,)
        )

    async def prepare_completion(self, body: CompletionRequest, context: RequestContext) -> PreparedGeneration:
        check_sampling_limits(body, max_n=self.settings.max_n)
        check_completion_options(body)
        prompts = completion_prompts(body)
        resolved = await self._resolve(body.model)
        requests, budgets, counts = [], [], []
        for position, prompt in enumerate(prompts):
            max_tokens, prompt_tokens = self._budget(body.max_tokens, resolved, prompt)
            budgets.append(max_tokens)
            counts.append(prompt_tokens)
            request_id = context.request_id if len(prompts) == 1 else f"{context.request_id}-{position}"
            requests.append(
                to_generation_request(
                    body,
                    resolved,
                    prompt=prompt,
                    max_tokens=max_tokens,
                    logprobs=body.logprobs,
                    deadline=context.deadline,
                    request_id=request_id,
                )
            )
        echo = tuple(prompts) if body.echo else None
        return self._prepared(
            body, context, resolved, requests, budgets, logprobs=body.logprobs, echo=echo, prompt_tokens=tuple(counts)
        )

    # -- admit ------------------------------------------------------------------------------------

    def try_admit(self, prepared: PreparedGeneration) -> Ticket | None:
        """A slot at once when one is free (no task, no wait), else None: then ``admit``."""
        self._refuse_if_draining()
        return self.admission.try_acquire(prepared.requests[0].model, prepared.adapter)

    def _refuse_if_draining(self) -> None:
        if self.draining:
            raise ShuttingDownError(
                "The gateway is shutting down; retry on another replica.", headers={"Retry-After": "1"}
            )

    async def admit(self, prepared: PreparedGeneration) -> Ticket:
        """Wait for a slot on the model (429 when the queue is full or the wait times out)."""
        self._refuse_if_draining()
        remaining = None if prepared.deadline is None else prepared.deadline - time.monotonic()
        try:
            return await self.admission.acquire(prepared.requests[0].model, prepared.adapter, remaining)
        except asyncio.CancelledError:
            self._finish(prepared, None, 499, "client_disconnect")
            raise
        except GatewayError as exc:
            self._finish(prepared, None, exc.status_code, "deadline" if isinstance(exc, BackendTimeoutError) else None)
            raise

    # -- generate, assemble, encode ---------------------------------------------------------------

    def _batches(self, prepared: PreparedGeneration) -> AsyncIterator[Positioned[GenerationChunk]]:
        """Every prompt's chunks in batches, with the prompt's position."""
        return merge([self.backend.generate(r) for r in prepared.requests])

    def _encoder(self, prepared: PreparedGeneration) -> ChunkEncoder:
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
        prepared: PreparedGeneration,
        run: RequestAssembler | None,
        status: int,
        cancel_reason: str | None,
        error: GatewayError | None = None,
    ) -> None:
        record = prepared.record
        if record is None:
            return
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
    def _opening(prepared: PreparedGeneration, encoder: ChunkEncoder, usage: Usage | None) -> bytes:
        """The role chunk of every choice, then (legacy ``echo``) each prompt's text."""
        choices = prepared.n * len(prepared.requests)
        opening = encoder.role_chunks(choices, usage)
        if prepared.echo:
            echoed = [ChoiceEvent(i, prepared.echo[i // prepared.n], None, None) for i in range(choices)]
            opening += encoder.events(echoed, usage)
        return opening

    async def stream(self, prepared: PreparedGeneration, ticket: Ticket) -> AsyncIterator[bytes]:
        """SSE frames. Errors before the first backend response propagate (so the edge can still
        answer with a status code); after that they become one error event that ends the stream.
        Backend responses that piled up while the client was being written to are sent as one
        coalesced chunk per choice (see ``Backend.generate``)."""
        encoder = self._encoder(prepared)
        run = _run(prepared)
        record = prepared.record
        assert record is not None
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
            self._finish(prepared, run, status, reason, error)

    async def complete(self, prepared: PreparedGeneration, ticket: Ticket) -> dict[str, Any]:
        """One response object with every choice's full text, finish reason and the usage."""
        run = _run(prepared)
        record = prepared.record
        assert record is not None
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
            self._finish(prepared, run, status, reason, error)
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
