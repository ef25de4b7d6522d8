"""Async-iterator plumbing for requests with several backend generations (a list of prompts).

Both helpers close every source in ``finally``: closing a backend generation is what cancels its
Triton call, so a merged stream that stops early must not leave any of its sources running.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

from gateway.backend.types import GenerationChunk

T = TypeVar("T")
Tagged = tuple[int, GenerationChunk]


async def tag(source: AsyncIterator[GenerationChunk]) -> AsyncIterator[Tagged]:
    """The single-source case: no tasks, just the position 0."""
    try:
        async for item in source:
            yield 0, item
    finally:
        await source.aclose()  # type: ignore[attr-defined]


async def merge_tagged(sources: Sequence[AsyncIterator[GenerationChunk]]) -> AsyncIterator[Tagged]:
    """Items of all sources as they arrive, tagged with their source's position."""
    pending: dict[asyncio.Future[GenerationChunk], int] = {
        asyncio.ensure_future(anext(source)): position for position, source in enumerate(sources)  # type: ignore[arg-type]
    }
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                position = pending.pop(future)
                try:
                    item = future.result()
                except StopAsyncIteration:
                    continue
                pending[asyncio.ensure_future(anext(sources[position]))] = position  # type: ignore[arg-type]
                yield position, item
    finally:
        for future in pending:
            future.cancel()
        if pending:
            await asyncio.wait(pending)
        for source in sources:
            await source.aclose()  # type: ignore[attr-defined]
