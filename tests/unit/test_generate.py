"""The generation loop: backend batches in, lists of choice events out, and whatever ends it, the
backend's iterator closed (what cancels a Triton call), the slot freed, the outcome finished once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

from gateway.backend.types import GenerationChunk, GenerationRequest
from gateway.core.admission import Admission, Ticket
from gateway.core.assemble import ChoiceEvent
from gateway.core.generate import Generation
from gateway.core.generation_plan import GenerationPlan
from gateway.core.outcome import RequestOutcome
from gateway.errors import BackendError, InvalidRequestError
from gateway.metrics import Metrics
from tests.fakes import ScriptedBackend, text_chunks
from tests.plans import make_plan

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Run:
    """A generation with the pieces a test inspects: the slot, the outcome."""

    def __init__(self, backend: object, plan: GenerationPlan | None = None) -> None:
        self.plan = plan or make_plan()
        self.admission = Admission(lambda model: (1, 0), 1.0)
        ticket = self.admission.try_acquire("m", None)
        assert isinstance(ticket, Ticket)
        self.outcome = RequestOutcome(self.plan, Metrics(self.admission), log=False)
        self.generation = Generation(self.plan, backend, ticket, self.outcome)  # type: ignore[arg-type]

    async def steps(self, way: str = "anext") -> list[list[ChoiceEvent]]:
        if way == "batches":
            return await steps_by_batches(self.generation)
        return [events async for events in self.generation]

    @property
    def ended(self) -> tuple[int, str | None]:
        assert self.outcome.finished
        assert self.admission.in_flight == 0, "the slot must be released"
        return self.outcome.record.status, self.outcome.record.cancel_reason


async def steps_by_batches(generation: Generation) -> list[list[ChoiceEvent]]:
    """The steps as a stream's consumer takes them (``http.streaming.StreamFrames``): it awaits
    ``next_batch`` itself and hands each batch to ``take``, ``ended`` at the end of the backend's
    stream, ``failed`` on an error; once ``done``, ``__anext__`` closes the generation."""
    steps = []
    next_batch = generation.next_batch
    assert next_batch is not None, "one backend generation is read directly"
    while not generation.done:
        try:
            try:
                events = generation.take(await next_batch())
            except StopAsyncIteration:
                events = generation.ended()
        except BaseException as exc:
            await generation.failed(exc)
            raise
        if events:
            steps.append(events)
    with pytest.raises(StopAsyncIteration):
        await anext(generation)
    return steps


@pytest.fixture(params=["anext", "batches"])
def way(request: pytest.FixtureRequest) -> str:
    """Each generation step by ``__anext__``, or by ``next_batch`` and ``take``: the same steps."""
    return str(request.param)


class BatchBackend(ScriptedBackend):
    """Yields all its chunks as one batch, as a connection does when the consumer fell behind."""

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[GenerationChunk], None]:
        self.requests.append(request)
        yield [c for c in self.chunks if isinstance(c, GenerationChunk)]
        self.finished += 1


async def test_each_backend_batch_is_one_step_then_usage_and_finish_reasons(way: str) -> None:
    backend = ScriptedBackend(text_chunks(b"he", b"llo", reason="length", prompt_tokens=3))
    run = Run(backend)
    assert await run.steps(way) == [[ChoiceEvent(0, "he", None, None)], [ChoiceEvent(0, "llo", "length", None)]]
    assert run.generation.usage.as_dict() == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert run.generation.finish_reasons == ["length"]
    assert backend.finished + backend.closed_early == 1, "the backend's iterator is closed"
    assert run.ended == (200, None)


async def test_a_batch_of_several_chunks_is_one_coalesced_event(way: str) -> None:
    run = Run(BatchBackend(text_chunks(b"he", b"l", b"lo", reason="stop")))
    assert await run.steps(way) == [[ChoiceEvent(0, "hello", "stop", None)]]
    assert run.ended == (200, None)


async def test_stop_string_ends_the_steps_and_closes_the_backend_early(way: str) -> None:
    backend = ScriptedBackend(text_chunks(b"ab", b"cE", b"ND", b"more", b"more", reason="length"))
    run = Run(backend, make_plan(stops=("END",)))
    steps = await run.steps(way)
    assert "".join(e.text for step in steps for e in step) == "abc"
    assert steps[-1][-1].finish_reason == "stop"
    assert backend.closed_early == 1 and backend.finished == 0
    assert run.ended == (200, "stop_string")


async def test_stop_string_on_the_final_chunk_is_not_a_cancellation(way: str) -> None:
    backend = ScriptedBackend(text_chunks(b"ab", b"END", reason="stop"))
    run = Run(backend, make_plan(stops=("END",)))
    await run.steps(way)
    assert run.ended == (200, None)


async def test_backend_error_after_the_first_step_is_raised_typed_and_finishes_the_outcome() -> None:
    backend = ScriptedBackend([text_chunks(b"a", b"b")[0], InvalidRequestError("the model refused")])
    run = Run(backend)
    assert await anext(run.generation) == [ChoiceEvent(0, "a", None, None)]
    with pytest.raises(InvalidRequestError, match="the model refused"):
        await anext(run.generation)
    assert run.ended == (400, None)
    assert run.outcome.record.completion_tokens == 1, "usage so far is kept"
    with pytest.raises(StopAsyncIteration):  # nothing more after an error
        await anext(run.generation)


async def test_an_aborted_sequence_is_a_backend_error(way: str) -> None:
    chunk = GenerationChunk(text=(b"x",), finish_reason=("abort",), final=True)
    run = Run(ScriptedBackend([chunk]))
    with pytest.raises(BackendError):
        await run.steps(way)
    assert run.ended == (500, None)


async def test_consumer_closing_early_closes_the_backend_and_counts_a_disconnect() -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b", b"c"))
    run = Run(backend)
    await anext(run.generation)
    await run.generation.aclose()
    await run.generation.aclose()  # idempotent
    assert backend.closed_early == 1
    assert run.ended == (499, "client_disconnect")


async def test_cancelled_while_waiting_for_the_backend_closes_it() -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b"), delay=10.0)
    run = Run(backend)
    step = asyncio.ensure_future(anext(run.generation))
    await asyncio.sleep(0.05)
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
    assert backend.closed_early == 1 and len(backend.requests) == 1
    assert run.ended == (499, "client_disconnect")


async def test_closing_before_the_first_step_still_finishes_the_outcome() -> None:
    backend = ScriptedBackend(text_chunks(b"a"))
    run = Run(backend)
    await run.generation.aclose()
    assert backend.requests == []  # the backend call was never opened
    assert run.ended == (499, "client_disconnect")


async def test_backend_stream_ending_without_a_final_flag_closes_every_choice(way: str) -> None:
    chunk = GenerationChunk(text=(b"hi",), finish_reason=(None,), num_output_tokens=(1,))
    run = Run(ScriptedBackend([chunk]), make_plan(max_tokens=(1,)))
    assert await run.steps(way) == [[ChoiceEvent(0, "hi", None, None)], [ChoiceEvent(0, "", "length", None)]]
    assert run.ended == (200, None)


async def test_echo_is_said_first_as_its_own_event(way: str) -> None:
    run = Run(ScriptedBackend(text_chunks(b" there")), make_plan(chat=False, echo=("hi",)))
    steps = await run.steps(way)
    assert steps == [[ChoiceEvent(0, "hi", None, None), ChoiceEvent(0, " there", "stop", None)]]


async def test_several_prompts_get_global_choice_indices() -> None:
    backend = ScriptedBackend(text_chunks(b"x", reason="stop"))
    run = Run(backend, make_plan(prompts=2, n=1, chat=False))
    events = [e for step in await run.steps() for e in step]
    assert sorted((e.index, e.text, e.finish_reason) for e in events) == [(0, "x", "stop"), (1, "x", "stop")]
    assert backend.finished + backend.closed_early == 2
    assert run.ended == (200, None)


async def test_n_choices_are_n_generations_with_the_prompt_counted_once() -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b", prompt_tokens=3))
    run = Run(backend, make_plan(n=3, include_usage=True))
    events = [e for step in await run.steps() for e in step]
    assert len(backend.requests) == 3
    texts = {i: "".join(e.text for e in events if e.index == i) for i in range(3)}
    assert texts == {0: "ab", 1: "ab", 2: "ab"}
    assert run.generation.finish_reasons == ["stop", "stop", "stop"]
    assert run.generation.usage.as_dict() == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    assert run.ended == (200, None)


async def test_n_choices_of_several_prompts_count_each_prompt_once() -> None:
    backend = ScriptedBackend(text_chunks(b"x", prompt_tokens=4))
    run = Run(backend, make_plan(prompts=2, n=2, chat=False))
    events = [e for step in await run.steps() for e in step]
    assert sorted(e.index for e in events) == [0, 1, 2, 3]
    assert (run.generation.usage.prompt_tokens, run.generation.usage.completion_tokens) == (8, 4)


async def test_closing_a_request_with_n_choices_closes_every_generation() -> None:
    backend = ScriptedBackend(text_chunks(b"a", b"b", b"c"), delay=0.01)
    run = Run(backend, make_plan(n=3))
    await anext(run.generation)
    await run.generation.aclose()
    assert len(backend.requests) == 3 and backend.closed_early == 3
    assert run.ended == (499, "client_disconnect")


async def test_one_choice_failing_fails_the_request_and_closes_the_others() -> None:
    class OneFails(ScriptedBackend):
        async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[GenerationChunk], None]:
            if request.request_id == "r-1":
                self.requests.append(request)
                raise BackendError("boom")
                yield []
            async for batch in super().stream(request):
                yield batch

    backend = OneFails(text_chunks(b"a", b"b", b"c"), delay=0.05)
    run = Run(backend, make_plan(n=3))
    with pytest.raises(BackendError):
        await run.steps()
    assert len(backend.requests) == 3 and backend.closed_early == 2
    assert run.ended == (500, None)
