"""Answering chat and legacy completions: ``chat.completion.chunk`` / ``text_completion`` stream
chunks ending in ``[DONE]`` (or OpenAI's error event), or one ``chat.completion`` /
``text_completion`` object."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.core.assemble import ChoiceEvent, Usage
from gateway.core.generate import Generation
from gateway.core.generation_plan import GenerationPlan
from gateway.errors import GatewayError
from gateway.http.errors import error_event
from gateway.http.sse import DATA_FRAMING, DONE_FRAME
from gateway.openai.encode import ChunkEncoder, CompletionBuilder
from gateway.openai.usage import ContinuousUsage


class CompletionAnswer:
    """The ``http.answer.Answer`` of ``POST /v1/chat/completions`` and ``/v1/completions``."""

    __slots__ = ("plan",)

    def __init__(self, plan: GenerationPlan) -> None:
        self.plan = plan

    def encoding(self, generation: Generation) -> ChunkEncoding:
        return ChunkEncoding(self.plan, generation)

    async def complete(self, generation: Generation) -> dict[str, Any]:
        """Every step of the generation collected into one response object."""
        plan = self.plan
        builder = CompletionBuilder(
            chat=plan.chat,
            completion_id=plan.completion_id,
            created=plan.created,
            model=plan.model_id,
            choices=plan.choices,
            logprobs=plan.logprobs is not None,
            legacy_functions=plan.tools is not None and plan.tools.legacy_functions,
            reasoning=plan.reasoning is not None and plan.reasoning.include,
        )
        try:
            async for events in generation:
                builder.add(events)
        finally:
            await generation.aclose()
        return builder.build(generation.finish_reasons, generation.usage)


class ChunkEncoding:
    """A stream's chunks (the ``http.streaming.StreamEncoding`` of chat and completions): the chat
    role chunks first, then each step's chunks, then the ``include_usage`` chunk and ``[DONE]``."""

    __slots__ = ("_generation", "_encoder", "_choices", "_usage", "_include_usage", "step")

    opens_early = False
    """The role chunks wait for the first step: with continuous usage they carry its prompt count."""

    def __init__(self, plan: GenerationPlan, generation: Generation) -> None:
        self._generation = generation
        self._encoder = ChunkEncoder(
            chat=plan.chat,
            completion_id=plan.completion_id,
            created=plan.created,
            model=plan.model_id,
            framing=DATA_FRAMING,
            include_usage=plan.include_usage,
            continuous_usage=plan.continuous_usage,
            legacy_functions=plan.tools is not None and plan.tools.legacy_functions,
        )
        self._choices = plan.choices
        self._usage = ContinuousUsage(plan.choices) if plan.continuous_usage else None
        self._include_usage = plan.include_usage
        self.step: Callable[[list[ChoiceEvent]], bytes] = (
            self._encoder.events if self._usage is None else self._step_with_usage
        )
        """One step's chunks: the encoder's own ``events`` unless each chunk carries its usage
        (chosen once: every token calls it)."""

    def opening(self) -> bytes:
        """The chat role chunks (none for legacy completions). With continuous usage they count
        no completion token: they are sent before any."""
        if self._usage is None:
            return self._encoder.role_chunks(self._choices)
        return self._encoder.role_chunks(self._choices, Usage(self._generation.usage.prompt_tokens, 0))

    def _step_with_usage(self, events: list[ChoiceEvent]) -> bytes:
        running = self._usage
        assert running is not None
        # One chunk per event, each with its own usage (see ``openai.usage``).
        generation = self._generation
        usages = running.per_event(
            events, generation.usage.prompt_tokens, generation.assembler.choice_completion_tokens
        )
        encode = self._encoder.events
        return b"".join([encode((event,), usage) for event, usage in zip(events, usages, strict=True)])

    async def closing(self) -> bytes:
        if self._include_usage:
            return self._encoder.usage_chunk(self._generation.usage) + DONE_FRAME
        return DONE_FRAME

    async def failure(self, error: GatewayError) -> bytes:
        return error_event(error)

    async def cut_off(self) -> None:
        pass
