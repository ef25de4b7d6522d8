"""The generation loop: backend batches → ``RequestAssembler`` → lists of choice events.

One loop for streaming and non-streaming requests alike; it knows nothing of SSE or OpenAI's JSON
(the HTTP edge encodes what it yields). Each step is what one backend batch made the choices say
(coalesced: one event per choice and batch where possible), so a slow consumer gets fewer, larger
steps. Errors are the typed ``GatewayError``s the backend and the assembler raise.

Whatever ends it, ``aclose`` runs: the loop calls it itself when every choice is done (a stop
string included), on an error, or when its task is cancelled mid-step; a consumer that stops
early (the client left while a frame was being written) calls it in its ``finally``. It closes
the backend's iterators, which is what cancels the Triton call, releases the admission slot, and
finishes the request's outcome.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from gateway.backend.types import Backend, GenerationChunk
from gateway.core.admission import Ticket
from gateway.core.assemble import ChoiceAssembler, ChoiceEvent, RequestAssembler, Usage, coalesce
from gateway.core.generation_plan import GenerationPlan
from gateway.core.outcome import RequestOutcome
from gateway.core.streams import Positioned, merge


class Generation:
    """One request's generation; async-iterate it for lists of ``ChoiceEvent``.

    A plain async iterator rather than an async generator: ``aclose`` must work (and finish the
    outcome) even when iteration never started, and the per-batch step is one coroutine, the same
    cost as a generator's. Every list it yields is non-empty. A stream's consumer, which every
    token wakes, awaits ``next_batch`` itself and hands the batch to ``take`` instead.
    """

    __slots__ = (
        "assembler",
        "_source",
        "_batches",
        "_ticket",
        "_outcome",
        "_opening",
        "_feed_lone",
        "_lone",
        "done",
        "next_batch",
        "_final",
        "_closed",
    )

    def __init__(self, plan: GenerationPlan, backend: Backend, ticket: Ticket, outcome: RequestOutcome) -> None:
        self.assembler = RequestAssembler(
            n=plan.n,
            chat=plan.chat,
            top_logprobs=plan.logprobs,
            token_ids=plan.token_ids,
            max_tokens=plan.max_tokens,
            prompt_tokens=plan.prompt_tokens,
            stops=plan.stops,
            include_stop=plan.include_stop,
            echo=plan.echo,
            tools=plan.tools,
            reasoning=plan.reasoning,
            detokenize=plan.detokenize,
            prompt_ids=[r.tokens.ids if r.tokens is not None else () for r in plan.requests],
            count_text=plan.count_completion,
        )
        outcome.backend_started = True
        sources = [backend.generate(r) for r in plan.requests]
        # One backend generation (every request but n > 1 or several prompts) is read directly:
        # ``merge`` would add an async-generator step per batch to say its position is 0.
        self._source: AsyncIterator[list[GenerationChunk]] | None = sources[0] if len(sources) == 1 else None
        self._batches: AsyncIterator[Positioned[GenerationChunk]] | None = (
            None if self._source is not None else merge(sources)
        )
        lone = self.assembler.lone_feed()
        self._feed_lone: Callable[[GenerationChunk], list[ChoiceEvent]] | None = lone[0] if lone else None
        self._lone: ChoiceAssembler | None = lone[1] if lone else None
        """A plain stream's one choice and its assembler's ``feed`` (see ``lone_feed``): its
        tokens skip the request's level of the assembly."""
        self._ticket = ticket
        self._outcome = outcome
        echo = plan.echo
        self._opening: list[ChoiceEvent] | None = (
            [ChoiceEvent(i, echo[i // plan.n], None, None) for i in range(plan.choices)] if echo else None
        )
        """Legacy ``echo``: each prompt's text, said before anything the backend says."""
        self.done = False
        """No step is left: every choice has ended (or the generation was closed). The next
        ``__anext__`` reads nothing from the backend; it closes the generation and stops."""
        self.next_batch: Callable[[], Awaitable[list[GenerationChunk]]] | None = (
            None if self._source is None else self._source.__anext__
        )
        """The one backend generation's next batch (None with several: they are merged), for a
        consumer that awaits it itself while ``done`` is false and gives it to ``take``, calls
        ``ended`` when it raises ``StopAsyncIteration`` and ``failed`` for any other error: a step
        of ``__anext__`` without its coroutine level, which every token's wake-up would resume."""
        self._final = False
        """Whether the backend ended by itself (a final chunk, or the end of its stream) rather
        than the gateway ending it (every choice hit a stop string)."""
        self._closed = False

    @property
    def usage(self) -> Usage:
        return self.assembler.usage

    @property
    def finish_reasons(self) -> list[str | None]:
        return self.assembler.finish_reasons

    @property
    def stop_sequences(self) -> list[str | None]:
        return self.assembler.stop_sequences

    def __aiter__(self) -> Generation:
        return self

    async def __anext__(self) -> list[ChoiceEvent]:
        if self.done:
            await self.aclose()
            raise StopAsyncIteration
        try:
            while True:
                try:
                    source = self._source
                    if source is not None:
                        events = self.take(await source.__anext__())
                    else:
                        assert self._batches is not None
                        position, batch = await self._batches.__anext__()
                        events = self.take(batch, position)
                except StopAsyncIteration:  # the backend ended without a final flag on every choice
                    events = self.ended()
                if events or self.done:
                    break
        except BaseException as exc:
            await self.failed(exc)
            raise
        if not events:
            await self.aclose()
            raise StopAsyncIteration
        return events

    def take(self, batch: list[GenerationChunk], position: int = 0) -> list[ChoiceEvent]:
        """The events of one backend batch (possibly none, while text is held back); sets ``done``
        when every choice has ended."""
        self._outcome.responded(self.assembler)
        feed_lone, lone = self._feed_lone, self._lone
        if lone is not None and feed_lone is not None and len(batch) == 1:  # a token of a plain stream
            chunk = batch[0]
            events = feed_lone(chunk)
            if lone.finish_reason is not None:
                self.done = True
                self._final = chunk.final
        else:
            run = self.assembler
            events = []
            for chunk in batch:
                events.extend(run.feed(position, chunk))
                if run.done:
                    self.done = True
                    self._final = chunk.final
                    break
        return self._said(events)

    def ended(self) -> list[ChoiceEvent]:
        """The backend's stream ended (without a final flag on every choice): the last events."""
        self.done = self._final = True
        return self._said(self.assembler.close())

    def _said(self, events: list[ChoiceEvent]) -> list[ChoiceEvent]:
        """A step's events coalesced, after legacy echo's opening on the first step that says
        anything (or ends the generation)."""
        if len(events) > 1:
            events = coalesce(events)
        opening = self._opening
        if opening is not None and (events or self.done):
            self._opening = None
            return opening + events
        return events

    async def failed(self, exc: BaseException) -> None:
        """A step failed with ``exc`` (the backend's error, or the task's cancellation): the
        outcome says so and the generation closes; the caller raises ``exc`` on."""
        self._outcome.fail(exc, self.assembler.usage)
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel the backend's work if it is still going, free the slot, finish the outcome: a
        success when every choice ended, else the consumer stopped early (the client left)."""
        if self._closed:
            return
        self._closed = self.done = True
        try:
            await (self._source or self._batches).aclose()  # type: ignore[union-attr]
        finally:
            run = self.assembler
            usage = run.usage
            self._ticket.release((usage.prompt_tokens, usage.completion_tokens))
            if run.done:
                several = self._source is None  # n > 1 or several prompts: read through ``merge``
                self._outcome.succeed(
                    run.usage, stopped_early=not (self._final or several), finish_reasons=run.finish_reasons
                )
            else:
                self._outcome.abandon(run.usage)
