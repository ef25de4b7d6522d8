"""Merging backend generations: every batch once with its prompt's position, nothing left running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.core.streams import merge

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Source:
    def __init__(self, batches: int, delay: float = 0.0, fail_at: int | None = None, tag: str = "") -> None:
        self.batches, self.delay, self.fail_at, self.tag = batches, delay, fail_at, tag
        self.closed = False

    async def run(self) -> AsyncIterator[list[str]]:
        try:
            for i in range(self.batches):
                if self.fail_at == i:
                    raise ValueError("boom")
                await asyncio.sleep(self.delay)
                yield [f"{self.tag}{i}a", f"{self.tag}{i}b"]
        finally:
            self.closed = True


async def test_one_source_keeps_its_batches_at_position_zero() -> None:
    source = Source(5)
    seen = [item async for item in merge([source.run()])]
    assert seen == [(0, [f"{i}a", f"{i}b"]) for i in range(5)] and source.closed


async def test_several_sources_deliver_every_batch_with_its_position() -> None:
    sources = [Source(6, delay=0.001 * (k + 1), tag=f"s{k}-") for k in range(3)]
    seen = [item async for item in merge([s.run() for s in sources])]
    for k, source in enumerate(sources):
        mine = [batch for position, batch in seen if position == k]
        assert mine == [[f"s{k}-{i}a", f"s{k}-{i}b"] for i in range(6)]
        assert source.closed


async def test_errors_reach_the_consumer_after_the_batches_before_them() -> None:
    seen: list[list[str]] = []
    with pytest.raises(ValueError, match="boom"):
        async for _, batch in merge([Source(10, fail_at=3).run()]):
            seen.append(batch)
    assert seen == [["0a", "0b"], ["1a", "1b"], ["2a", "2b"]]


@pytest.mark.parametrize("count", [1, 3])
async def test_closing_early_closes_every_source(count: int) -> None:
    sources = [Source(1000, delay=0.001) for _ in range(count)]
    stream = merge([s.run() for s in sources])
    await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert all(s.closed for s in sources)
