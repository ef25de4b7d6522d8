"""What a level of ``await`` costs each time a task wakes, counted by valgrind.

A token wakes the task that streams it: the loop runs the task's step, which resumes the
outermost coroutine of the task's chain, which resumes the next one, down to the one that waited.
So every coroutine between the task's own and the wait is paid once per token. This counts the
instructions per wake-up of a task whose wait is ``depth`` levels down, the levels being:

- ``frames``: coroutines that stay (an ASGI middleware's ``await self.app(...)``);
- ``calls``: a coroutine made per step (an iterator's ``async def __anext__``);
- ``generators``: async generators (``async for ... yield``), stepped per item.

Each wake-up is one loop callback that hands the waiting iterator one item, as a socket's read
callback hands the gateway a token (uvloop, as the gateway runs). The difference between two run
lengths, divided by the extra wake-ups, leaves out start-up.

    .venv/bin/python bench/await_levels.py [--depths 0,4,12] [--wakes 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

from instructions import callgrind, feed_in_turn


class Source:
    """An iterator whose consumer waits on a future until the feeder hands it an item."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.items: list[int] = []
        self.waiter: asyncio.Future[None] | None = None

    def push(self, item: int) -> None:
        self.items.append(item)
        waiter, self.waiter = self.waiter, None
        if waiter is not None:
            waiter.set_result(None)

    def __aiter__(self) -> Source:
        return self

    async def __anext__(self) -> list[int]:
        while not self.items:
            self.waiter = self.loop.create_future()
            await self.waiter
        items, self.items = self.items, []
        return items


class CallLevel:
    """A level that is a coroutine per step."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __anext__(self) -> list[int]:
        return await self.inner.__anext__()  # type: ignore[no-any-return]


async def generator_level(inner: Any) -> AsyncIterator[list[int]]:
    async for items in inner:
        yield items


async def consume(iterator: Any, wakes: int) -> None:
    taken = 0
    while taken < wakes:
        taken += len(await iterator.__anext__())


async def frame_level(depth: int, iterator: Any, wakes: int) -> None:
    if depth == 0:
        return await consume(iterator, wakes)
    return await frame_level(depth - 1, iterator, wakes)


async def child(kind: str, depth: int, wakes: int) -> None:
    loop = asyncio.get_running_loop()
    source = Source()
    iterator: Any = source
    if kind == "calls":
        for _ in range(depth):
            iterator = CallLevel(iterator)
    elif kind == "generators":
        for _ in range(depth):
            iterator = generator_level(iterator)
    task = loop.create_task(frame_level(depth if kind == "frames" else 0, iterator, wakes))
    await feed_in_turn(list(range(wakes)), source.push)
    await task


def count(kind: str, depth: int, wakes: int) -> int:
    return callgrind([sys.executable, __file__, "--child", kind, str(depth), str(wakes)])["Ir"]


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        import uvloop

        uvloop.run(child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depths", default="0,4,12")
    parser.add_argument("--wakes", type=int, default=10_000)
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    base = args.wakes // 5
    for kind in ("frames", "calls", "generators"):
        per_wake = {d: (count(kind, d, base + args.wakes) - count(kind, d, base)) / args.wakes for d in depths}
        levels = max(depths) - min(depths)
        slope = (per_wake[max(depths)] - per_wake[min(depths)]) / levels if levels else 0.0
        figures = ", ".join(f"depth {d}: {per_wake[d]:,.0f}" for d in depths)
        print(f"{kind:>10}: instructions per wake-up, {figures}; {slope:,.0f} per level")


if __name__ == "__main__":
    main()
