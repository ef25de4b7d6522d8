"""Answering an Anthropic Messages request: its SSE events, or its message object.

The generation is chat's (``http.answer.respond`` admits it, primes it and watches the client
exactly as for chat, and ``http.streaming.StreamFrames`` frames it); this module only encodes it
(``anthropic.encode.MessageEncoder``). An error after the headers went out is one ``error``
event with Anthropic's error body, and the stream ends.
"""

from __future__ import annotations

from typing import Any

from gateway.anthropic.encode import MessageEncoder, MessageOptions, error_event
from gateway.core.generate import Generation
from gateway.errors import GatewayError, anthropic_error_body
from gateway.http.sse import event_framing
from gateway.plan.messages import MessagesPlan
from gateway.reasoning.seal import ReasoningSeal


class MessagesAnswer:
    """The ``http.answer.Answer`` of ``POST /v1/messages``."""

    __slots__ = ("plan", "options")

    def __init__(self, plan: MessagesPlan, seal: ReasoningSeal) -> None:
        self.plan = plan
        self.options = MessageOptions(
            seal=seal,
            show_thinking=plan.show_thinking,
            window_limited=plan.window_limited,
            context_management=plan.context_management,
        )

    def encoder(self) -> MessageEncoder:
        return MessageEncoder(self.plan.message_id, self.plan.model, event_framing, self.options)

    def encoding(self, generation: Generation) -> MessagesEncoding:
        return MessagesEncoding(self.encoder(), generation)

    async def complete(self, generation: Generation) -> dict[str, Any]:
        encoder = self.encoder()
        try:
            async for events in generation:
                encoder.events(events)
        finally:
            await generation.aclose()
        _, message = encoder.closing(generation.finish_reasons[0], generation.stop_sequences[0], generation.usage)
        return message


class MessagesEncoding:
    """A streamed message's events (its ``http.streaming.StreamEncoding``)."""

    __slots__ = ("_generation", "_encoder", "step")

    opens_early = False
    """``message_start`` waits for the first step: it carries the prompt's token count."""

    def __init__(self, encoder: MessageEncoder, generation: Generation) -> None:
        self._generation = generation
        self._encoder = encoder
        self.step = encoder.events
        """The per-token call, straight to the encoder."""

    def opening(self) -> bytes:
        return self._encoder.opening(self._generation.usage.prompt_tokens)

    async def closing(self) -> bytes:
        generation = self._generation
        frames, _ = self._encoder.closing(generation.finish_reasons[0], generation.stop_sequences[0], generation.usage)
        return frames

    async def failure(self, error: GatewayError) -> bytes:
        return error_event(anthropic_error_body(error), event_framing)

    async def cut_off(self) -> None:
        pass
