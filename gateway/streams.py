"""Async-iterator plumbing for requests with several backend generations (a list of prompts).

Both helpers close every source in ``finally``: closing a backend generation is what cancels its
Triton call, so a merged stream that stops early must not leave any of its sources running.
"""

from __future__ import annotations

import asyncio
from collections import deque
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


_pumps: set[asyncio.Task[None]] = set()


async def batched(source: AsyncIterator[T]) -> AsyncIterator[list[T]]:
    """Everything that arrived since the previous batch, as one batch.

    A pump task reads ``source`` as fast as it produces; the consumer takes whatever piled up while
    it was busy writing to a slow client. So a slow reader gets fewer, larger chunks instead of a
    queue of tiny ones, and under CPU pressure the gateway makes fewer socket writes per token.
    The pile is bounded by what the backend generates for one request; the backend is never
    paused. Closing this generator cancels the pump, which closes ``source`` (and so cancels the
    Triton call).
    """
    buffer: deque[T] = deque()
    ready = asyncio.Event()
    finished = False
    failure: BaseException | None = None

    async def pump() -> None:
        nonlocal finished, failure
        try:
            async for item in source:
                buffer.append(item)
                ready.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the consumer, raised there
            failure = exc
        finally:
            finished = True
            ready.set()
            await source.aclose()  # type: ignore[attr-defined]

    task = asyncio.ensure_future(pump())
    _pumps.add(task)
    task.add_done_callback(_pumps.discard)
    try:
        while True:
            if not buffer and not finished:
                await ready.wait()
                ready.clear()
            if buffer:
                items = list(buffer)
                buffer.clear()
                yield items
            elif finished:
                if failure is not None:
                    raise failure
                return
    finally:
        if not task.done():
            task.cancel()  # not awaited: the pump's cleanup is synchronous up to the gRPC cancel
