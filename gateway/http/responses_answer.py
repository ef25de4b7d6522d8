"""Answering a Responses request: its SSE events or its Response object, and storing it.

The generation is chat's (``http.answer.respond`` admits it, primes it and watches the client exactly as for
chat); this module only encodes it (``openai.responses_encode.ResponseEncoder``) and keeps it
(``store``). A response is stored once the client has its id, and before the event or body that
ends it goes out, so a client that continues the conversation at once finds it:

- completed, or incomplete at the token cap: the final object;
- failed mid-stream (the backend's error, after ``response.created``): the failed object, whose
  ``error`` is the same OpenAI error object chat's error event carries;
- a stream whose client left: the object as far as it got, ``incomplete`` (the Triton call is
  cancelled first).

A non-streamed response that fails, or whose client leaves, never gave its id to anyone: nothing is
stored. A store that fails to write is logged and the answer still goes out: the generation
succeeded, only its continuation is lost.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.core.generate import Generation
from gateway.errors import GatewayError, error_body
from gateway.http.sse import event_framing
from gateway.http.streaming import First
from gateway.openai.responses_encode import ResponseEncoder
from gateway.plan.responses import ResponsesPlan
from gateway.store.base import ResponseStore, StoredResponse

logger = logging.getLogger(__name__)


class ResponsesAnswer:
    """The ``http.answer.Answer`` of ``POST /v1/responses``."""

    __slots__ = ("plan", "store")

    def __init__(self, plan: ResponsesPlan, store: ResponseStore | None) -> None:
        self.plan = plan
        self.store = store if plan.store else None

    def frames(self, generation: Generation, first: First) -> ResponseFrames:
        return ResponseFrames(self, generation, first)

    async def complete(self, generation: Generation) -> dict[str, Any]:
        encoder = ResponseEncoder(self.plan.head, event_framing)
        try:
            async for events in generation:
                encoder.events(events)
        finally:
            await generation.aclose()
        _, response = encoder.closing(generation.finish_reasons[0], generation.usage)
        await self.save(response)
        return response

    async def save(self, response: dict[str, Any]) -> None:
        store = self.store
        if store is None:
            return
        plan = self.plan
        stored = StoredResponse(
            id=plan.response_id,
            owner=plan.owner,
            created_at=float(plan.created_at),
            response=response,
            input_items=plan.input_items,
            previous_response_id=plan.previous_response_id,
        )
        try:
            await store.put(stored)
        except Exception:  # the answer still goes out; only its continuation is lost
            logger.warning("could not store response %s", plan.response_id, exc_info=True)


class ResponseFrames:
    """The SSE events of one streamed response, one ``__anext__`` per generation step (see
    ``http.streaming.StreamFrames``, chat's counterpart, for the priming and closing rules)."""

    __slots__ = ("_answer", "_generation", "_first", "_pending", "_encoder", "_opened", "_ended")

    def __init__(self, answer: ResponsesAnswer, generation: Generation, first: First) -> None:
        self._answer = answer
        self._generation = generation
        self._first: First | None = first
        self._pending: asyncio.Task[Any] | None = None
        """The first step, still running when the opening events went out."""
        self._encoder = ResponseEncoder(answer.plan.head, event_framing)
        self._opened = False
        """Whether ``response.created`` went out: from then on the client has the id."""
        self._ended = False

    def __aiter__(self) -> ResponseFrames:
        return self

    @property
    def ended(self) -> bool:
        return self._ended

    async def __anext__(self) -> bytes:
        if self._ended:
            raise StopAsyncIteration
        encoder, generation = self._encoder, self._generation
        first = self._first
        if first is not None:
            # The opening goes out at once, so the client has the id even while the first token
            # is still coming (a long prefill): then the first step is the next frame.
            self._first = None
            self._opened = True
            if isinstance(first, list):
                return encoder.opening() + encoder.events(first)
            self._pending = first
            return encoder.opening()
        try:
            while True:
                pending = self._pending
                if pending is not None:
                    self._pending = None
                    events = await pending
                else:
                    events = await generation.__anext__()
                frames = encoder.events(events)
                if frames:
                    return frames
        except StopAsyncIteration:
            self._ended = True
            frames, response = encoder.closing(generation.finish_reasons[0], generation.usage)
        except GatewayError as exc:
            self._ended = True
            logger.warning("response failed mid-stream: %s", exc.message)
            frames, response = encoder.failed(error_body(exc)["error"], generation.usage)
        except Exception:  # a bug below must still end the stream with an event, never cut it off
            self._ended = True
            logger.exception("response failed mid-stream with an unexpected error")
            error = GatewayError("The server had an error while processing your request.")
            frames, response = encoder.failed(error_body(error)["error"], generation.usage)
        await self._answer.save(response)
        return frames

    async def aclose(self) -> None:
        for task in (self._first, self._pending):
            if isinstance(task, asyncio.Task):
                # The task is inside the generation's step: let its cancellation unwind there first.
                task.cancel()
                await asyncio.wait({task})
        self._first = self._pending = None
        await self._generation.aclose()
        if self._opened and not self._ended:  # the client left mid-stream: keep what it got
            self._ended = True
            await self._answer.save(self._encoder.cut_off(self._generation.usage))
