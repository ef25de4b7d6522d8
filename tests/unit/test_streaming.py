"""A stream's SSE bytes from a real generation: the whole stream byte for byte, the error event,
priming (early errors raise, a slow first step does not hold the headers), closing, continuous usage."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator

import pytest

from gateway.backend.types import GenerationChunk, GenerationRequest
from gateway.core.admission import Admission
from gateway.core.generate import Generation
from gateway.core.generation_plan import GenerationPlan
from gateway.core.outcome import RequestOutcome
from gateway.errors import BackendError, BackendUnavailableError
from gateway.http.completion_answer import ChunkEncoding
from gateway.http.streaming import First, FirstStep, StreamFrames
from gateway.metrics import Metrics
from tests.fakes import ScriptedBackend, text_chunks
from tests.plans import make_plan

pytestmark = pytest.mark.anyio

HEAD = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","system_fingerprint":null,"choices":['


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def start(backend: ScriptedBackend, plan: GenerationPlan) -> tuple[Generation, RequestOutcome]:
    admission = Admission(lambda model: (0, 0), 1.0)
    ticket = admission.try_acquire("m", None)
    assert ticket is not None
    outcome = RequestOutcome(plan, Metrics(admission), log=False)
    return Generation(plan, backend, ticket, outcome), outcome  # type: ignore[arg-type]


def chunk_frames(plan: GenerationPlan, generation: Generation, first: First) -> StreamFrames:
    return StreamFrames(ChunkEncoding(plan, generation), generation, first)


async def stream_bytes(
    backend: ScriptedBackend, plan: GenerationPlan, wait: float = 1.0
) -> tuple[bytes, RequestOutcome]:
    generation, outcome = start(backend, plan)
    frames = chunk_frames(plan, generation, await FirstStep(generation).wait(wait))
    try:
        body = b"".join([frame async for frame in frames])
    finally:
        await frames.aclose()
    return body, outcome


async def test_whole_chat_stream_byte_exact_with_usage_and_done() -> None:
    plan = make_plan(include_usage=True)
    body, outcome = await stream_bytes(
        ScriptedBackend(text_chunks(b"he", b"llo", reason="length", prompt_tokens=3)), plan
    )
    assert body == (
        HEAD
        + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        + HEAD
        + b'{"index":0,"delta":{"content":"he"},"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        + HEAD
        + b'{"index":0,"delta":{"content":"llo"},"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        + HEAD
        + b'{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}],"usage":null}\n\n'
        + HEAD
        + b'],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n'
        + b"data: [DONE]\n\n"
    )
    assert outcome.record.status == 200


async def test_legacy_stream_has_no_role_chunk_and_echo_comes_first() -> None:
    plan = make_plan(chat=False, completion_id="cmpl-1", echo=("Q:",))
    body, _ = await stream_bytes(ScriptedBackend(text_chunks(b" A")), plan)
    events = body.split(b"\n\n")
    assert b'"text":"Q:"' in events[0] and b'"text":" A"' in events[1]
    assert body.endswith(b'"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
    assert b"role" not in body


async def test_error_mid_stream_is_one_error_event_and_nothing_after() -> None:
    backend = ScriptedBackend([text_chunks(b"a", b"b")[0], BackendError("the model failed")])
    body, outcome = await stream_bytes(backend, make_plan())
    last = body.split(b"\n\n")[-2] + b"\n\n"
    assert last == (
        b'data: {"error":{"message":"the model failed","type":"server_error","param":null,"code":"backend_error"}}\n\n'
    )
    assert b"[DONE]" not in body
    assert outcome.record.status == 500 and backend.closed_early == 1


async def test_an_error_before_the_first_step_raises_from_priming() -> None:
    backend = ScriptedBackend([BackendUnavailableError("Triton is down")])
    generation, outcome = start(backend, make_plan())
    with pytest.raises(BackendUnavailableError):
        await FirstStep(generation).wait(1.0)
    assert outcome.finished and outcome.record.status == 503


async def test_a_slow_first_step_does_not_hold_priming_back() -> None:
    backend = ScriptedBackend(text_chunks(b"late"), delay=0.3)
    generation, outcome = start(backend, make_plan())
    first = await asyncio.wait_for(FirstStep(generation).wait(0.05), 0.2)
    assert isinstance(first, asyncio.Task)
    frames = chunk_frames(make_plan(), generation, first)
    body = b"".join([frame async for frame in frames])
    assert b'"content":"late"' in body and body.endswith(b"data: [DONE]\n\n")
    assert outcome.record.status == 200


async def test_closing_while_the_first_step_is_pending_cancels_it_and_the_backend() -> None:
    backend = ScriptedBackend(text_chunks(b"late"), delay=5.0)
    generation, outcome = start(backend, make_plan())
    first = await FirstStep(generation).wait(0.05)
    assert isinstance(first, asyncio.Task)
    await asyncio.wait_for(chunk_frames(make_plan(), generation, first).aclose(), 1.0)
    assert first.cancelled() and backend.closed_early == 1
    assert outcome.record.status == 499 and outcome.record.cancel_reason == "client_disconnect"


async def test_unexpected_error_mid_stream_still_ends_the_body_with_an_error_event() -> None:
    """A bug below the HTTP edge (not a typed error) after headers went out must not cut the body
    off: the client gets a server_error event, the backend is closed, the outcome is a 500."""
    backend = ScriptedBackend([text_chunks(b"he", b"llo")[0], RuntimeError("a bug")])
    body, outcome = await stream_bytes(backend, make_plan())
    last = body.split(b"\n\n")[-2]
    assert last.startswith(b'data: {"error":{') and b'"type":"server_error"' in last
    assert b"[DONE]" not in body
    assert outcome.record.status == 500


class OneBatchBackend(ScriptedBackend):
    """Every chunk in one batch: what a client slower than the model gets."""

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[GenerationChunk], None]:
        self.requests.append(request)
        yield [item for item in self.chunks if isinstance(item, GenerationChunk)]


def with_logprobs(chunks: list[GenerationChunk]) -> list[GenerationChunk]:
    entry = {"7": {"logprob": -0.5, "rank": 1, "decoded_token": "x"}}
    return [chunk._replace(logprobs=([entry],)) for chunk in chunks]


@pytest.mark.parametrize("batched", [False, True], ids=["step-per-token", "one-step"])
async def test_continuous_usage_is_exact_on_every_chunk_from_the_role_chunk_on(batched: bool) -> None:
    chunks = with_logprobs(text_chunks(b"a", b"b", b"c", reason="length", prompt_tokens=4))
    backend = (OneBatchBackend if batched else ScriptedBackend)(chunks)
    plan = make_plan(include_usage=True, continuous_usage=True, logprobs=0)
    body, _ = await stream_bytes(backend, plan)
    frames = [json.loads(line[6:]) for line in body.decode().split("\n\n") if line.startswith("data: {")]
    role, *content, finish, totals = frames
    assert role["choices"][0]["delta"]["role"] == "assistant"
    assert role["usage"] == {"prompt_tokens": 4, "completion_tokens": 0, "total_tokens": 4}
    seen = 0
    for frame in content:
        seen += len(frame["choices"][0]["logprobs"]["content"])
        assert frame["usage"]["completion_tokens"] == seen
    assert seen == 3 and finish["usage"]["completion_tokens"] == 3 and finish["choices"][0]["finish_reason"] == "length"
    assert totals["choices"] == [] and totals["usage"]["completion_tokens"] == 3


async def test_the_step_that_ends_every_choice_carries_the_closing_in_the_same_frame() -> None:
    plan = make_plan(include_usage=True)
    generation, outcome = start(ScriptedBackend(text_chunks(b"he", b"llo", reason="length", prompt_tokens=3)), plan)
    frames = chunk_frames(plan, generation, await FirstStep(generation).wait(1.0))
    try:
        steps = [frame async for frame in frames]
    finally:
        await frames.aclose()
    last = steps[-1]
    assert frames.ended
    assert b'"finish_reason":"length"' in last and b'"completion_tokens":2' in last and last.endswith(b"[DONE]\n\n")
    assert not any(b"[DONE]" in step for step in steps[:-1])
    assert outcome.record.status == 200  # the generation was closed before its last bytes went out
