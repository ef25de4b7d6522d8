"""Batching and merging of backend iterators: nothing lost, nothing left running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.streams import batched

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Source:
    def __init__(self, items: int, delay: float = 0.0, fail_at: int | None = None) -> None:
        self.items, self.delay, self.fail_at = items, delay, fail_at
        self.closed = False

    async def run(self) -> AsyncIterator[int]:
        try:
            for i in range(self.items):
                if self.fail_at == i:
                    raise ValueError("boom")
                await asyncio.sleep(self.delay)
                yield i
        finally:
            self.closed = True


async def test_batches_deliver_every_item_in_order() -> None:
    source = Source(50, delay=0.0005)
    seen = [item async for batch in batched(source.run()) for item in batch]
    assert seen == list(range(50)) and source.closed


async def test_a_slow_consumer_gets_larger_batches() -> None:
    source = Source(40, delay=0.001)
    sizes = []
    async for batch in batched(source.run()):
        sizes.append(len(batch))
        await asyncio.sleep(0.01)
    assert sum(sizes) == 40 and max(sizes) > 1


async def test_errors_reach_the_consumer_after_the_items_before_them() -> None:
    seen: list[int] = []
    with pytest.raises(ValueError, match="boom"):
        async for batch in batched(Source(10, fail_at=3).run()):
            seen.extend(batch)
    assert seen == [0, 1, 2]


async def test_closing_early_closes_the_source() -> None:
    source = Source(1000, delay=0.001)
    stream = batched(source.run())
    await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    for _ in range(20):
        if source.closed:
            break
        await asyncio.sleep(0.005)
    assert source.closed
