"""Async-iterator plumbing between the backend and the stream: batching, and merging several
backend generations (a list of prompts).

Both helpers close every source in ``finally``: closing a backend generation is what cancels its
Triton call, so a merged stream that stops early must not leave any of its sources running.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

from gateway.backend.types import GenerationChunk

Tagged = tuple[int, GenerationChunk]


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


async def batched(source: AsyncIterator[Any], position: int | None = None) -> AsyncIterator[list[Any]]:
    """Everything that arrived since the previous batch, as one batch.

    A pump task reads ``source`` as fast as it produces; the consumer takes whatever piled up while
    it was busy writing to a slow client. So a slow reader gets fewer, larger chunks instead of a
    queue of tiny ones, and under CPU pressure the gateway makes fewer socket writes per token.
    The pile is bounded by what the backend generates for one request; the backend is never
    paused. Closing this generator cancels the pump, which closes ``source`` (and so cancels the
    Triton call). With ``position``, items are tagged ``(position, item)`` on the way, as
    ``merge_tagged`` tags them for several sources, without another generator layer.
    """
    buffer: deque[Any] = deque()
    ready = asyncio.Event()
    finished = False
    failure: BaseException | None = None

    async def pump() -> None:
        nonlocal finished, failure
        try:
            if position is None:
                async for item in source:
                    buffer.append(item)
                    ready.set()
            else:
                async for item in source:
                    buffer.append((position, item))
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
            task.cancel()
            # Wait for it (one loop turn: its cleanup is synchronous up to the gRPC cancel), so the
            # Triton call is cancelled before the stream is reported finished.
            await asyncio.wait({task}, timeout=1.0)
