"""Answering a Responses request: its SSE events or its Response object, and storing it.

The generation is chat's (``http.answer.respond`` admits it, primes it and watches the client
exactly as for chat, and ``http.streaming.StreamFrames`` frames it); this module only encodes it
(``openai.responses_encode.ResponseEncoder``) and keeps it (``store``). A response is stored once
the client has its id, and before the event or body that ends it goes out, so a client that
continues the conversation at once finds it:

- completed, or incomplete at the token cap: the final object;
- failed mid-stream (the backend's error, after ``response.created``): the failed object, whose
  ``error`` is the same OpenAI error object chat's error event carries;
- a stream whose client left: the object as far as it got, ``incomplete`` (the Triton call is
  cancelled first).

A non-streamed response that fails, or whose client leaves, never gave its id to anyone: nothing is
stored. (A background response is stored at every change of status: ``http.background_answer``.)
A store that fails to write is logged and the answer still goes out: the generation succeeded,
only its continuation is lost.
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.core.generate import Generation
from gateway.errors import GatewayError, error_body
from gateway.http.sse import event_framing
from gateway.openai.responses_encode import ResponseEncoder, ResponseOptions
from gateway.plan.responses import ResponsesPlan
from gateway.reasoning.seal import ReasoningSeal
from gateway.store.base import ResponseStore, StoredResponse

logger = logging.getLogger(__name__)


class ResponsesAnswer:
    """The ``http.answer.Answer`` of ``POST /v1/responses``."""

    __slots__ = ("plan", "store", "options")

    def __init__(self, plan: ResponsesPlan, store: ResponseStore | None, seal: ReasoningSeal | None = None) -> None:
        self.plan = plan
        self.store = store if plan.store else None
        self.options = ResponseOptions(
            seal=seal if plan.seal_reasoning else None,
            summarize=plan.summarize_reasoning,
            namespaced=plan.tools.namespaced,
        )

    def encoding(self, generation: Generation) -> ResponsesEncoding:
        return ResponsesEncoding(self, generation)

    def encoder(self) -> ResponseEncoder:
        """A new encoder of this response's events and objects."""
        return ResponseEncoder(self.plan.head, event_framing, self.options)

    async def complete(self, generation: Generation) -> dict[str, Any]:
        encoder = self.encoder()
        try:
            async for events in generation:
                encoder.events(events)
        finally:
            await generation.aclose()
        _, response = encoder.closing(generation.finish_reasons[0], generation.usage)
        await self.save(response)
        return response

    async def save(self, response: dict[str, Any]) -> None:
        try:
            await self.put(response)
        except Exception:  # the answer still goes out; only its continuation is lost
            logger.warning("could not store response %s", self.plan.response_id, exc_info=True)

    async def put(self, response: dict[str, Any]) -> None:
        """Store ``response`` (when the response is stored), raising what the store raises."""
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
        await store.put(stored)


class ResponsesEncoding:
    """A streamed response's events (its ``http.streaming.StreamEncoding``); the Response object
    is stored before the event that ends the stream goes out."""

    __slots__ = ("_answer", "_generation", "_encoder", "step")

    opens_early = True
    """``response.created`` goes out at once: the client has the id even while a long prefill runs."""

    def __init__(self, answer: ResponsesAnswer, generation: Generation, encoder: ResponseEncoder | None = None) -> None:
        self._answer = answer
        self._generation = generation
        self._encoder = encoder or answer.encoder()
        self.step = self._encoder.events
        """The per-token call, straight to the encoder."""

    def opening(self) -> bytes:
        return self._encoder.opening()

    async def closing(self) -> bytes:
        generation = self._generation
        frames, response = self._encoder.closing(generation.finish_reasons[0], generation.usage)
        await self.ended(response)
        return frames

    async def failure(self, error: GatewayError) -> bytes:
        frames, response = self._encoder.failed(error_body(error)["error"], self._generation.usage)
        await self.ended(response)
        return frames

    async def ended(self, response: dict[str, Any]) -> None:
        """The final object, stored before the event that carries it goes out."""
        await self._answer.save(response)

    async def cut_off(self) -> None:
        await self._answer.save(self._encoder.cut_off(self._generation.usage))
