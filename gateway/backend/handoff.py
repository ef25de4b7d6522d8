"""The shape of the backend's generation streams: a first step of their own, then a hand-off.

A generation passes through two levels below the core (the replica pool, the Triton client) and
every token passes through both. As async generators, each level cost every token's wake-up a
frame to resume (~1,240 instructions, counted with callgrind). What each level does happens
around the first batch (placing the generation, opening the call, one retry) and on closing, so
after its first step a level hands out the next level's ``__anext__`` as it is, and a token's
wake-up resumes no frame of its. A level handed another level's ``__anext__`` takes that
level's own step instead, so two levels cost a token one call, not two: a level's step changes
after its hand-off only when it is closed, and only the level above closes it, having stopped
its own steps first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Self

from gateway.backend.types import GenerationChunk


async def _ended() -> list[GenerationChunk]:
    raise StopAsyncIteration


Step = Callable[[], Awaitable[list[GenerationChunk]]]


def step_of(step: Step) -> Step:
    """What a hand-off to ``step`` takes: a ``HandOffStream``'s ``__anext__`` that has handed off
    itself is replaced by the step it handed off to (its level is skipped, not called through)."""
    inner = getattr(step, "__self__", None)
    if isinstance(inner, HandOffStream) and getattr(step, "__func__", None) is HandOffStream.__anext__:
        below = inner._next
        if getattr(below, "__func__", None) is not HandOffStream._first:
            return below  # the level below has handed off too: its step, not a call through it
    return step


class HandOffStream:
    """A ``GenerationStream`` whose ``__anext__`` is whatever ``_next`` holds: ``_start`` for the
    first step, which on success calls ``_hand_off`` with the next level's ``__anext__``."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next: Step = self._first

    def __aiter__(self) -> Self:
        return self

    def __anext__(self) -> Awaitable[list[GenerationChunk]]:
        return self._next()

    async def _first(self) -> list[GenerationChunk]:
        self._next = _ended  # as a generator: a stream that ended or failed in its first step stays ended
        return await self._start()

    async def _start(self) -> list[GenerationChunk]:
        raise NotImplementedError

    def _hand_off(self, step: Step) -> None:
        self._next = step_of(step)

    def _stop(self) -> None:
        """No more steps: what ``aclose`` does first."""
        self._next = _ended
