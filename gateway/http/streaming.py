"""A streaming request's SSE frames: priming for early errors, then one frame batch per step.

Priming (``FirstStep``) waits up to ``first_response_wait`` for the generation's first step before
any header is sent: an error that early (Triton down, a model refusing the request) then raises
and gets a real status code instead of a 200 stream with an error event, while a slow first token
(a long prefill) does not hold the headers back longer than that, so pings start flowing. ``StreamFrames`` then
turns each step of the generation into SSE bytes: the chat role chunks, the content chunks, the
``include_usage`` chunk and ``[DONE]``, or, after an error, one error event and nothing more.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.core.assemble import ChoiceEvent, Usage
from gateway.core.generate import Generation
from gateway.core.generation_plan import GenerationPlan
from gateway.errors import GatewayError
from gateway.http.errors import error_event
from gateway.http.sse import DATA_FRAMING, DONE_FRAME
from gateway.openai.encode import ChunkEncoder
from gateway.openai.usage import ContinuousUsage

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


class StreamFrames:
    """The SSE bytes of one stream, one ``__anext__`` per generation step.

    A plain iterator object rather than another async generator layer, since every step of the
    stream passes through it; ``aclose`` closes the generation (cancelling Triton's work if it is
    still going)."""

    __slots__ = ("_generation", "_first", "_encoder", "_choices", "_usage", "_include_usage", "_ended")

    def __init__(self, plan: GenerationPlan, generation: Generation, first: First) -> None:
        self._generation = generation
        self._first: First | None = first
        self._encoder = ChunkEncoder(
            chat=plan.chat,
            completion_id=plan.completion_id,
            created=plan.created,
            model=plan.model_id,
            framing=DATA_FRAMING,
            include_usage=plan.include_usage,
            continuous_usage=plan.continuous_usage,
        )
        self._choices = plan.choices
        self._usage = ContinuousUsage(plan.choices) if plan.continuous_usage else None
        self._include_usage = plan.include_usage
        self._ended = False

    def __aiter__(self) -> StreamFrames:
        return self

    @property
    def ended(self) -> bool:
        return self._ended

    async def __anext__(self) -> bytes:
        if self._ended:
            raise StopAsyncIteration
        generation = self._generation
        out = b""
        try:
            first = self._first
            if first is None:
                out = self._chunks(await generation.__anext__())
            else:
                self._first = None
                if not isinstance(first, list):
                    first = await first
                out = self._opening(first)
            if not generation.done:
                return out
            # Every choice has ended: the closing goes out with this step's chunks, in one write.
            # A finished generation's next step reads nothing: it closes it and stops.
            await generation.__anext__()
            raise StopAsyncIteration  # never reached: a finished generation yields no step
        except StopAsyncIteration:
            self._ended = True
            closing = DONE_FRAME
            if self._include_usage:
                closing = self._encoder.usage_chunk(generation.usage) + closing
            return out + closing
        except GatewayError as exc:
            self._ended = True
            logger.warning("request failed mid-stream: %s", exc.message)
            return out + error_event(exc)
        except Exception:  # a bug below must still end the body with an event, never cut it off
            self._ended = True
            logger.exception("request failed mid-stream with an unexpected error")
            return out + error_event(GatewayError("The server had an error while processing your request."))

    def _chunks(self, events: list[ChoiceEvent]) -> bytes:
        if self._usage is None:
            return self._encoder.events(events, None)
        return self._continuous_events(events, self._usage)

    def _opening(self, events: list[ChoiceEvent]) -> bytes:
        """The chat role chunks, then the first step's. With continuous usage the role chunks count
        no completion token: they are sent before any."""
        encoder, running = self._encoder, self._usage
        if running is None:
            return encoder.role_chunks(self._choices) + encoder.events(events, None)
        before = Usage(self._generation.usage.prompt_tokens, 0)
        return encoder.role_chunks(self._choices, before) + self._continuous_events(events, running)

    def _continuous_events(self, events: list[ChoiceEvent], running: ContinuousUsage) -> bytes:
        """One chunk per event, each with its own usage (see ``openai.usage``)."""
        generation = self._generation
        usages = running.per_event(
            events, generation.usage.prompt_tokens, generation.assembler.choice_completion_tokens
        )
        encode = self._encoder.events
        return b"".join([encode((event,), usage) for event, usage in zip(events, usages, strict=True)])

    async def aclose(self) -> None:
        first = self._first
        self._first = None
        if isinstance(first, asyncio.Task):
            # The task is inside the generation's step: let its cancellation unwind there first
            # (closing a generation mid-step would close the backend's iterator while it runs).
            first.cancel()
            await asyncio.wait({first})
        await self._generation.aclose()
