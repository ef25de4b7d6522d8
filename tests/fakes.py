"""An in-memory backend for unit tests of the HTTP edge: replays scripted chunks, records what it
was asked and whether the generation was closed early (what cancels a real Triton call).

A subclass changes what a generation yields by overriding ``stream`` (an async generator);
``generate`` hands it out as a ``GenerationStream``, which keeps the error it raised, as the
gateway's own streams do (the replica pool reads it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field

from gateway.backend.types import BackendModel, Embedding, EmbeddingRequest, GenerationChunk, GenerationRequest


@dataclass
class ScriptedBackend:
    chunks: Sequence[GenerationChunk | Exception] = ()
    delay: float = 0.0
    models: tuple[str, ...] = ("m",)
    platform: str = ""
    """Triton's ``backend`` for every model (``vllm``: the real vLLM backend)."""
    ready: bool = True
    requests: list[GenerationRequest] = field(default_factory=list)
    closed_early: int = 0
    finished: int = 0

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def server_ready(self) -> bool:
        return self.ready

    async def list_models(self) -> list[BackendModel]:
        return [BackendModel(name=m, platform=self.platform) for m in self.models]

    def abort_all(self, error: Exception) -> int:
        return 0

    async def embed(self, request: EmbeddingRequest) -> Embedding:
        """A vector of the input's length, so order is visible."""
        if self.delay:
            await asyncio.sleep(self.delay)
        return Embedding([float(len(request.input)), 0.0], len(request.input))

    def generate(self, request: GenerationRequest) -> FakeStream:
        return FakeStream(self.stream(request))

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[GenerationChunk], None]:
        self.requests.append(request)
        completed = False
        try:
            for item in self.chunks:
                if self.delay:
                    await asyncio.sleep(self.delay)
                if isinstance(item, Exception):
                    raise item
                yield [item]
            completed = True
        finally:
            if completed:
                self.finished += 1
            else:
                self.closed_early += 1


class FakeStream:
    """An async generator as a ``GenerationStream``."""

    def __init__(self, source: AsyncGenerator[list[GenerationChunk], None]) -> None:
        self._source = source
        self.error: BaseException | None = None

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> list[GenerationChunk]:
        try:
            return await self._source.__anext__()
        except StopAsyncIteration:
            raise
        except Exception as exc:
            self.error = exc
            raise

    async def aclose(self) -> None:
        await self._source.aclose()


def text_chunks(*pieces: bytes, reason: str = "stop", prompt_tokens: int = 3) -> list[GenerationChunk]:
    out = []
    for position, piece in enumerate(pieces):
        last = position == len(pieces) - 1
        out.append(
            GenerationChunk(
                text=(piece,),
                finish_reason=(reason if last else None,),
                num_input_tokens=prompt_tokens,
                num_output_tokens=(1,),
                final=last,
            )
        )
    return out
