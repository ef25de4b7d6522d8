"""A streaming request's SSE frames: priming for early errors, then one frame per step.

Priming (``FirstStep``) waits up to ``first_response_wait`` for the generation's first step before
any header is sent: an error that early (Triton down, a model refusing the request) then raises
and gets a real status code instead of a 200 stream with an error event, while a slow first token
(a long prefill) does not hold the headers back longer than that, so pings start flowing.

``StreamFrames`` then turns the generation's steps into frames, by one set of rules for every
stream: the opening, one frame per step that says something, the closing in the frame of the
step that ends the generation, and after an error one error frame and nothing more. What the
frames say is a ``StreamEncoding``'s: chat and legacy completions' chunks
(``http.completion_answer``), the Responses API's events (``http.responses_answer``) or
Anthropic's Messages events (``http.messages_answer``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from gateway.core.assemble import ChoiceEvent
from gateway.core.generate import Generation
from gateway.errors import GatewayError

logger = logging.getLogger(__name__)

First = list[ChoiceEvent] | asyncio.Task[list[ChoiceEvent]]
"""The first step, or the task still waiting for it when priming timed out."""


async def _first_step(generation: Generation, ready: asyncio.Future[None]) -> list[ChoiceEvent]:
    """The first step; ``ready`` is set as it ends (with it, or with its error), so the waiting
    request resumes in the next loop turn instead of two turns later through the task's done
    callbacks."""
    try:
        return await generation.__anext__()
    except StopAsyncIteration:
        return []
    finally:
        _ready(ready)


def _ready(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


class FirstStep:
    """The generation's first step, started now in a task of its own (which opens the backend's
    call when the loop next runs it), and waited for with ``wait``."""

    __slots__ = ("_ready", "_task")

    def __init__(self, generation: Generation) -> None:
        loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[None] = loop.create_future()
        self._task = loop.create_task(_first_step(generation, self._ready))

    async def wait(self, wait: float) -> First:
        """The first step, or (after ``wait`` seconds) the task that will have it. Raises the
        generation's error when it fails within the wait."""
        ready, task = self._ready, self._task
        timer = asyncio.get_running_loop().call_later(wait, _ready, ready)
        try:
            await ready
        except asyncio.CancelledError:  # the client left while we waited: stop the generation now
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
            raise
        finally:
            timer.cancel()
        # The step sets ``ready`` in its last line, so a step that ended has its task done by now.
        return task.result() if task.done() else task


class StreamEncoding(Protocol):
    """What one stream's frames say; ``StreamFrames`` decides when each part goes out."""

    opens_early: bool
    """Whether the opening goes out before the first step (the Responses API: the client has the
    response's id while a long prefill runs) rather than with it."""

    def opening(self) -> bytes: ...

    def step(self, events: list[ChoiceEvent]) -> bytes:
        """One step's bytes; b"" when the step says nothing a client sees (no frame then)."""
        ...

    async def closing(self) -> bytes:
        """The stream's last bytes, once every choice has ended."""
        ...

    async def failure(self, error: GatewayError) -> bytes:
        """The stream's last bytes after an error."""
        ...

    async def cut_off(self) -> None:
        """The client left after the opening and before the end."""
        ...


class StreamFrames:
    """The SSE bytes of one stream, one ``__anext__`` per generation step.

    A plain iterator object rather than another async generator layer, since every step of the
    stream passes through it; ``aclose`` closes the generation (cancelling Triton's work if it is
    still going)."""

    __slots__ = ("_encoding", "_generation", "_first", "_pending", "ended")

    def __init__(self, encoding: StreamEncoding, generation: Generation, first: First) -> None:
        self._encoding = encoding
        self._generation = generation
        self._first: First | None = first
        self._pending: asyncio.Task[list[ChoiceEvent]] | None = None
        """The first step, still running when an early opening went out."""
        self.ended = False
        """Whether the frame just returned was the stream's last (an attribute, not a property:
        the writer asks per frame)."""

    def __aiter__(self) -> StreamFrames:
        return self

    async def __anext__(self) -> bytes:
        if self.ended:
            raise StopAsyncIteration
        encoding, generation = self._encoding, self._generation
        out = b""
        try:
            first = self._first
            if first is not None:
                self._first = None
                if not isinstance(first, list):
                    if encoding.opens_early:
                        self._pending = first
                        return encoding.opening()
                    first = await first
                out = encoding.opening() + encoding.step(first)
            elif self._pending is not None:
                pending, self._pending = self._pending, None
                out = encoding.step(await pending)
            step, next_batch = encoding.step, generation.next_batch
            while not generation.done:
                if out:
                    return out
                if next_batch is None:  # several backend generations, merged
                    out = step(await generation.__anext__())
                    continue
                # The generation's step, inline: a token's wake-up resumes one coroutine less.
                try:
                    try:
                        events = generation.take(await next_batch())
                    except StopAsyncIteration:
                        events = generation.ended()
                except BaseException as exc:
                    await generation.failed(exc)
                    raise
                if events:
                    out = step(events)
            # Every choice has ended: the closing goes out with this step's bytes, in one write.
            # A finished generation's next step reads nothing: it closes it and stops.
            await generation.__anext__()
            raise StopAsyncIteration  # never reached: a finished generation yields no step
        except StopAsyncIteration:
            self.ended = True
            return out + await encoding.closing()
        except GatewayError as exc:
            self.ended = True
            logger.warning("request failed mid-stream: %s", exc.message)
            return out + await encoding.failure(exc)
        except Exception:  # a bug below must still end the body with an event, never cut it off
            self.ended = True
            logger.exception("request failed mid-stream with an unexpected error")
            return out + await encoding.failure(GatewayError("The server had an error while processing your request."))

    async def aclose(self) -> None:
        opened = self._first is None
        for task in (self._first, self._pending):
            if isinstance(task, asyncio.Task):
                # The task is inside the generation's step: let its cancellation unwind there first
                # (closing a generation mid-step would close the backend's iterator while it runs).
                task.cancel()
                await asyncio.wait({task})
        self._first = self._pending = None
        await self._generation.aclose()
        if opened and not self.ended:
            self.ended = True
            await self._encoding.cut_off()
