"""The core: a validated OpenAI request in, SSE frames or a response object out.

Knows nothing of FastAPI. Each request goes translate (``prepare_*``) → backend → assemble →
encode. The backend iterators are always closed in ``finally``, which is what cancels the Triton
call when the client leaves, a stop string ends every choice, or the deadline passes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gateway.assemble import ChoiceEvent, GenerationAssembler, Usage
from gateway.backend.types import Backend, GenerationRequest
from gateway.catalog import ModelCatalog, ServedModel
from gateway.config import Settings
from gateway.errors import GatewayError, error_body
from gateway.logprobs import chat_logprobs, completion_logprobs, merge_completion_logprobs
from gateway.responses import DONE_FRAME, ChunkEncoder, chat_completion, error_frame, text_completion
from gateway.schemas import ChatCompletionRequest, CompletionRequest, SamplingFields
from gateway.streams import Tagged, merge_tagged, tag
from gateway.translate.chat import chat_max_tokens, render_chat_prompt, to_generation_request
from gateway.translate.completions import check_completion_options, completion_prompts, to_completion_generation
from gateway.translate.models import ResolvedModel, resolve_model
from gateway.translate.sampling import resolve_max_tokens, stop_list

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


def count_prompt_tokens(model: ServedModel, prompt: str) -> int | None:
    if model.tokenizer is None:
        return None
    return len(model.tokenizer.encode(prompt).ids)


class _Run:
    """The assembly state of one request: an assembler per prompt, choice indices made global,
    logprobs mapped to OpenAI's shape only when they were asked for."""

    def __init__(self, prepared: PreparedGeneration) -> None:
        self.n = prepared.n
        self.chat = prepared.chat
        self.top = prepared.logprobs
        self.assemblers = [
            GenerationAssembler(prepared.n, stops=prepared.stops, include_stop=prepared.include_stop, max_tokens=m)
            for m in prepared.max_tokens
        ]
        self.offsets = [len(e) for e in prepared.echo for _ in range(prepared.n)] if prepared.echo else None

    @property
    def done(self) -> bool:
        return all(a.done for a in self.assemblers)

    @property
    def usage(self) -> Usage:
        usages = [a.usage for a in self.assemblers]
        return Usage(sum(u.prompt_tokens for u in usages), sum(u.completion_tokens for u in usages))

    @property
    def finish_reasons(self) -> list[str | None]:
        return [c.finish_reason for a in self.assemblers for c in a.choices]

    def feed(self, item: Tagged) -> list[ChoiceEvent]:
        position, chunk = item
        events = self.assemblers[position].feed(chunk)
        if position == 0 and self.top is None:
            return events  # the common case: nothing to rewrite
        return self._globalize(position, events)

    def close(self) -> list[ChoiceEvent]:
        out: list[ChoiceEvent] = []
        for position, assembler in enumerate(self.assemblers):
            out.extend(self._globalize(position, assembler.close()))
        return out

    def _globalize(self, position: int, events: list[ChoiceEvent]) -> list[ChoiceEvent]:
        out = []
        for event in events:
            index = position * self.n + event.index
            logprobs: Any = None
            if self.top is not None:
                if self.chat:
                    logprobs = {"content": chat_logprobs(event.logprobs, self.top)}
                else:
                    offset = self.offsets[index] if self.offsets else 0
                    logprobs = completion_logprobs(event.logprobs, self.top, offset)
            if self.offsets is not None:
                self.offsets[index] += len(event.text)
            out.append(ChoiceEvent(index, event.text, event.finish_reason, logprobs))
        return out


class CompletionService:
    """Turns OpenAI requests into backend generations and back."""

    def __init__(self, backend: Backend, catalog: ModelCatalog, settings: Settings) -> None:
        self.backend = backend
        self.catalog = catalog
        self.settings = settings

    async def _resolve(self, model_id: str) -> ResolvedModel:
        return resolve_model(model_id, await self.catalog.models(), self.settings.lora_separator)

    def _max_tokens(self, requested: int | None, resolved: ResolvedModel, prompt: str) -> int:
        return resolve_max_tokens(
            requested,
            prompt_tokens=count_prompt_tokens(resolved.model, prompt),
            max_model_len=resolved.model.max_model_len,
            fallback=self.settings.default_max_tokens,
        )

    def _prepared(
        self, body: SamplingFields, requests: list[GenerationRequest], max_tokens: list[int], **extra: Any
    ) -> PreparedGeneration:
        options = body.stream_options
        chat = isinstance(body, ChatCompletionRequest)
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
            **extra,
        )

    async def prepare_chat(self, body: ChatCompletionRequest, request_id: str) -> PreparedGeneration:
        resolved = await self._resolve(body.model)
        prompt = render_chat_prompt(body, resolved)
        max_tokens = self._max_tokens(chat_max_tokens(body), resolved, prompt)
        generation = to_generation_request(
            body, resolved, request_id=request_id, prompt=prompt, max_tokens=max_tokens,
            timeout=self.settings.request_timeout,
        )
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        return self._prepared(body, [generation], [max_tokens], logprobs=logprobs)

    async def prepare_completion(self, body: CompletionRequest, request_id: str) -> PreparedGeneration:
        check_completion_options(body)
        prompts = completion_prompts(body)
        resolved = await self._resolve(body.model)
        requests, budgets = [], []
        for position, prompt in enumerate(prompts):
            max_tokens = self._max_tokens(body.max_tokens, resolved, prompt)
            budgets.append(max_tokens)
            requests.append(
                to_completion_generation(
                    body, resolved, prompt=prompt, max_tokens=max_tokens, timeout=self.settings.request_timeout,
                    request_id=request_id if len(prompts) == 1 else f"{request_id}-{position}",
                )
            )
        return self._prepared(
            body, requests, budgets, logprobs=body.logprobs, echo=tuple(prompts) if body.echo else None
        )

    def _source(self, prepared: PreparedGeneration) -> AsyncIterator[Tagged]:
        generations = [self.backend.generate(r) for r in prepared.requests]
        return tag(generations[0]) if len(generations) == 1 else merge_tagged(generations)

    def _encoder(self, prepared: PreparedGeneration) -> ChunkEncoder:
        return ChunkEncoder(
            chat=prepared.chat,
            completion_id=prepared.completion_id,
            created=prepared.created,
            model=prepared.model_id,
            include_usage=prepared.include_usage,
            continuous_usage=prepared.continuous_usage,
        )

    async def stream(self, prepared: PreparedGeneration) -> AsyncIterator[bytes]:
        """SSE frames. Errors before the first backend response propagate (so the edge can still
        answer with a status code); after that they become one error event that ends the stream."""
        encoder = self._encoder(prepared)
        run = _Run(prepared)
        continuous = prepared.continuous_usage
        source = self._source(prepared)
        try:
            first = await anext(source, None)
            events = run.feed(first) if first is not None else run.close()
            choices = prepared.n * len(prepared.requests)
            opening = encoder.role_chunks(choices, run.usage if continuous else None)
            if prepared.echo:
                echoed = [ChoiceEvent(i, prepared.echo[i // prepared.n], None, None) for i in range(choices)]
                opening += encoder.events(echoed, run.usage if continuous else None)
            yield opening
            try:
                if events:
                    yield encoder.events(events, run.usage if continuous else None)
                if not run.done:
                    async for item in source:
                        events = run.feed(item)
                        if events:
                            yield encoder.events(events, run.usage if continuous else None)
                        if run.done:
                            break
                    else:
                        events = run.close()
                        if events:
                            yield encoder.events(events, run.usage if continuous else None)
            except GatewayError as exc:
                logger.warning("request %s failed mid-stream: %s", prepared.requests[0].request_id, exc.message)
                yield error_frame(error_body(exc))
                return
            if prepared.include_usage:
                yield encoder.usage_chunk(run.usage)
            yield DONE_FRAME
        finally:
            await source.aclose()  # type: ignore[attr-defined]

    async def complete(self, prepared: PreparedGeneration) -> dict[str, Any]:
        """One response object with every choice's full text, finish reason and the usage."""
        run = _Run(prepared)
        choices = prepared.n * len(prepared.requests)
        texts: list[list[str]] = [[] for _ in range(choices)]
        if prepared.echo:
            for index in range(choices):
                texts[index].append(prepared.echo[index // prepared.n])
        logprobs: list[list[Any]] = [[] for _ in range(choices)]
        source = self._source(prepared)

        def collect(events: list[ChoiceEvent]) -> None:
            for event in events:
                texts[event.index].append(event.text)
                if event.logprobs is not None:
                    logprobs[event.index].append(event.logprobs)

        try:
            async for item in source:
                collect(run.feed(item))
                if run.done:
                    break
            else:
                collect(run.close())
        finally:
            await source.aclose()  # type: ignore[attr-defined]
        build = chat_completion if prepared.chat else text_completion
        return build(
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
