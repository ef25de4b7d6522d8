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

from collections.abc import AsyncIterator

from gateway.backend.types import Backend, GenerationChunk
from gateway.core.admission import Ticket
from gateway.core.assemble import ChoiceEvent, RequestAssembler, Usage, coalesce
from gateway.core.generation_plan import GenerationPlan
from gateway.core.outcome import RequestOutcome
from gateway.core.streams import Positioned, merge


class Generation:
    """One request's generation; async-iterate it for lists of ``ChoiceEvent``.

    A plain async iterator rather than an async generator: ``aclose`` must work (and finish the
    outcome) even when iteration never started, and the per-batch step is one coroutine, the same
    cost as a generator's. Every list it yields is non-empty.
    """

    __slots__ = (
        "assembler",
        "_source",
        "_batches",
        "_ticket",
        "_outcome",
        "_opening",
        "_done",
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
        self._ticket = ticket
        self._outcome = outcome
        echo = plan.echo
        self._opening: list[ChoiceEvent] | None = (
            [ChoiceEvent(i, echo[i // plan.n], None, None) for i in range(plan.choices)] if echo else None
        )
        """Legacy ``echo``: each prompt's text, said before anything the backend says."""
        self._done = False
        """No more steps: every choice has ended (the next step closes the backend and ends the
        iteration), or the generation was closed."""
        self._final = False
        """Whether the backend ended by itself (a final chunk, or the end of its stream) rather
        than the gateway ending it (every choice hit a stop string)."""
        self._closed = False

    @property
    def done(self) -> bool:
        """No step is left: every choice has ended (or the generation was closed). The next
        ``__anext__`` reads nothing from the backend; it closes the generation and stops."""
        return self._done

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
        if self._done:
            await self.aclose()
            raise StopAsyncIteration
        run = self.assembler
        try:
            while True:
                try:
                    source = self._source
                    if source is not None:
                        position, batch = 0, await source.__anext__()
                    else:
                        assert self._batches is not None
                        position, batch = await self._batches.__anext__()
                except StopAsyncIteration:  # the backend ended without a final flag on every choice
                    self._done = self._final = True
                    events = run.close()
                    break
                self._outcome.responded(run)
                events = []
                for chunk in batch:
                    events.extend(run.feed(position, chunk))
                    if run.done:
                        self._done = True
                        self._final = chunk.final
                        break
                if events:  # always, once done: a choice that ends says so
                    break
        except BaseException as exc:
            self._outcome.fail(exc, run.usage)
            await self.aclose()
            raise
        events = coalesce(events)
        opening = self._opening
        if opening is not None:
            self._opening = None
            return opening + events
        if not events:
            await self.aclose()
            raise StopAsyncIteration
        return events

    async def aclose(self) -> None:
        """Cancel the backend's work if it is still going, free the slot, finish the outcome: a
        success when every choice ended, else the consumer stopped early (the client left)."""
        if self._closed:
            return
        self._closed = self._done = True
        try:
            await (self._source or self._batches).aclose()  # type: ignore[union-attr]
        finally:
            self._ticket.release()
            run = self.assembler
            if run.done:
                several = self._source is None  # n > 1 or several prompts: read through ``merge``
                self._outcome.succeed(
                    run.usage, stopped_early=not (self._final or several), finish_reasons=run.finish_reasons
                )
            else:
                self._outcome.abandon(run.usage)
