"""The core: a validated OpenAI request in, SSE frames or a response object out.

Knows nothing of FastAPI. Each request goes translate (``prepare_*``) → backend → assemble →
encode. The backend iterator is always closed in ``finally``, which is what cancels the Triton
call when the client leaves, a stop string ends every choice, or the deadline passes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gateway.assemble import GenerationAssembler
from gateway.backend.types import Backend, GenerationChunk, GenerationRequest
from gateway.catalog import ModelCatalog, ServedModel
from gateway.config import Settings
from gateway.errors import GatewayError, error_body
from gateway.responses import DONE_FRAME, ChunkEncoder, chat_completion, error_frame
from gateway.schemas import ChatCompletionRequest
from gateway.translate.chat import chat_max_tokens, render_chat_prompt, to_generation_request
from gateway.translate.models import resolve_model
from gateway.translate.sampling import resolve_max_tokens, stop_list

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PreparedGeneration:
    """Everything decided before the backend is called."""

    request: GenerationRequest
    chat: bool
    model_id: str
    completion_id: str
    created: int
    n: int
    stops: tuple[str, ...]
    include_stop: bool
    max_tokens: int
    include_usage: bool
    continuous_usage: bool


def count_prompt_tokens(model: ServedModel, prompt: str) -> int | None:
    if model.tokenizer is None:
        return None
    return len(model.tokenizer.encode(prompt).ids)


class CompletionService:
    """Turns OpenAI requests into backend generations and back."""

    def __init__(self, backend: Backend, catalog: ModelCatalog, settings: Settings) -> None:
        self.backend = backend
        self.catalog = catalog
        self.settings = settings

    async def prepare_chat(self, body: ChatCompletionRequest, request_id: str) -> PreparedGeneration:
        resolved = resolve_model(body.model, await self.catalog.models(), self.settings.lora_separator)
        prompt = render_chat_prompt(body, resolved)
        max_tokens = resolve_max_tokens(
            chat_max_tokens(body),
            prompt_tokens=count_prompt_tokens(resolved.model, prompt),
            max_model_len=resolved.model.max_model_len,
            fallback=self.settings.default_max_tokens,
        )
        generation = to_generation_request(
            body,
            resolved,
            request_id=request_id,
            prompt=prompt,
            max_tokens=max_tokens,
            timeout=self.settings.request_timeout,
        )
        options = body.stream_options
        return PreparedGeneration(
            request=generation,
            chat=True,
            model_id=body.model,
            completion_id=f"chatcmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            n=body.n,
            stops=tuple(stop_list(body.stop)),
            include_stop=body.include_stop_str_in_output,
            max_tokens=max_tokens,
            include_usage=bool(options and options.include_usage),
            continuous_usage=bool(options and options.continuous_usage_stats),
        )

    def _assembler(self, prepared: PreparedGeneration) -> GenerationAssembler:
        return GenerationAssembler(
            prepared.n, stops=prepared.stops, include_stop=prepared.include_stop, max_tokens=prepared.max_tokens
        )

    async def stream(self, prepared: PreparedGeneration) -> AsyncIterator[bytes]:
        """SSE frames. Errors before the first backend response propagate (so the edge can still
        answer with a status code); after that they become one error event that ends the stream."""
        encoder = ChunkEncoder(
            chat=prepared.chat,
            completion_id=prepared.completion_id,
            created=prepared.created,
            model=prepared.model_id,
            include_usage=prepared.include_usage,
            continuous_usage=prepared.continuous_usage,
        )
        assembler = self._assembler(prepared)
        continuous = prepared.continuous_usage
        chunks = self.backend.generate(prepared.request)
        try:
            first: GenerationChunk | None = await anext(chunks, None)
            events = assembler.feed(first) if first is not None else assembler.close()
            yield encoder.role_chunks(prepared.n, assembler.usage if continuous else None)
            try:
                if events:
                    yield encoder.events(events, assembler.usage if continuous else None)
                if not assembler.done:
                    async for chunk in chunks:
                        events = assembler.feed(chunk)
                        if events:
                            yield encoder.events(events, assembler.usage if continuous else None)
                        if assembler.done:
                            break
                    else:
                        events = assembler.close()
                        if events:
                            yield encoder.events(events, assembler.usage if continuous else None)
            except GatewayError as exc:
                logger.warning("request %s failed mid-stream: %s", prepared.request.request_id, exc.message)
                yield error_frame(error_body(exc))
                return
            if prepared.include_usage:
                yield encoder.usage_chunk(assembler.usage)
            yield DONE_FRAME
        finally:
            await chunks.aclose()

    async def complete(self, prepared: PreparedGeneration) -> dict[str, Any]:
        """One response object with every choice's full text and the usage."""
        assembler = self._assembler(prepared)
        texts: list[list[str]] = [[] for _ in range(prepared.n)]
        chunks = self.backend.generate(prepared.request)
        try:
            async for chunk in chunks:
                for event in assembler.feed(chunk):
                    texts[event.index].append(event.text)
                if assembler.done:
                    break
            else:
                for event in assembler.close():
                    texts[event.index].append(event.text)
        finally:
            await chunks.aclose()
        return chat_completion(
            completion_id=prepared.completion_id,
            created=prepared.created,
            model=prepared.model_id,
            texts=["".join(parts) for parts in texts],
            finish_reasons=[c.finish_reason for c in assembler.choices],
            logprobs=None,
            usage=assembler.usage,
        )
