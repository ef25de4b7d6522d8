"""Merging several backend generations (a request's choices: ``n`` per prompt) into one stream of batches.

A backend generation yields *batches*: everything that arrived since its consumer last asked
(``Backend.generate``). So a slow HTTP client gets fewer, larger chunks instead of a queue of tiny
ones. This module only adds the generation's position (its choice's index), and closes every
source in ``finally``: closing a generation is what cancels its Triton call, so a merged stream
that stops early must not leave any of its sources running. A request with one generation (the
usual case) does not come here: ``Generation`` reads that generation itself, without this
module's generator step per batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

T = TypeVar("T")

Positioned = tuple[int, list[T]]


async def merge(sources: Sequence[AsyncIterator[list[T]]]) -> AsyncIterator[Positioned[T]]:
    """Each source's batches as they arrive, with the source's position."""
    pending: dict[asyncio.Future[list[T]], int] = {
        asyncio.ensure_future(anext(source)): position for position, source in enumerate(sources)
    }
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                position = pending.pop(future)
                try:
                    batch = future.result()
                except StopAsyncIteration:
                    continue
                pending[asyncio.ensure_future(anext(sources[position]))] = position
                yield position, batch
    finally:
        for future in pending:
            future.cancel()
        if pending:
            await asyncio.wait(pending)
        for source in sources:
            await source.aclose()  # type: ignore[attr-defined]
