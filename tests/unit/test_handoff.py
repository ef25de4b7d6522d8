"""A level of the backend's streams hands its consumer the next level's step after its first
batch; two levels that both handed off cost a token one call, and closing still ends both."""

from __future__ import annotations

import pytest

from gateway.backend.handoff import HandOffStream
from gateway.backend.types import GenerationChunk

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def chunk(text: bytes) -> GenerationChunk:
    return GenerationChunk(text=(text,), finish_reason=(None,))


class Source:
    """The innermost step: the call's ``__anext__``, counting its calls."""

    def __init__(self, count: int) -> None:
        self.left = count
        self.calls = 0

    async def __anext__(self) -> list[GenerationChunk]:
        self.calls += 1
        if not self.left:
            raise StopAsyncIteration
        self.left -= 1
        return [chunk(b"x")]


class Level(HandOffStream):
    """A level whose first step takes one batch from ``below`` and hands off its ``__anext__``."""

    __slots__ = ("below", "closed")

    def __init__(self, below: Source | HandOffStream) -> None:
        super().__init__()
        self.below = below
        self.closed = False

    async def _start(self) -> list[GenerationChunk]:
        batch = await self.below.__anext__()
        self._hand_off(self.below.__anext__)
        return batch

    async def aclose(self) -> None:
        self._stop()
        self.closed = True
        if isinstance(self.below, Level):
            await self.below.aclose()


async def test_two_levels_that_handed_off_reach_the_source_directly() -> None:
    source = Source(3)
    inner = Level(source)
    outer = Level(inner)
    batches = [batch async for batch in outer]
    assert len(batches) == 3
    assert outer._next == source.__anext__, "the outer level's step is the source's, not the inner level's"
    assert source.calls == 4  # three batches, then the end


async def test_a_level_below_that_has_not_handed_off_is_called_through() -> None:
    source = Source(2)
    inner = Level(source)
    outer = Level(inner)
    outer._hand_off(inner.__anext__)  # before the inner level's first step
    assert outer._next == inner.__anext__
    assert len([batch async for batch in outer]) == 2


async def test_closing_stops_both_levels() -> None:
    source = Source(5)
    outer = Level(Level(source))
    assert len(await outer.__anext__()) == 1
    await outer.aclose()
    with pytest.raises(StopAsyncIteration):
        await outer.__anext__()
    assert source.calls == 1  # the first batch only: nothing is read after the close
