"""The replica pool moves a stream whose replica failed mid-stream (pure logic, fake replicas).

Each fake replica runs a deterministic "model": token ``i`` is ``t<i> `` with id ``i``, one per
response, and a request that carries ``resume_ids`` starts after them, as tiny-llm's replay
does; a replica told to die raises the transport's unreachable error after some tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.backend.contracts.continuation import (
    RESUME_TOKEN_IDS,
    RETURN_TOKEN_IDS,
    by_text,
    by_tokens,
    reduced_sampling,
)
from gateway.backend.replicas.pool import ReplicaPool
from gateway.backend.replicas.router import Policy, Router
from gateway.backend.types import BackendModel, GenerationChunk, GenerationRequest, Produced, TokenPrompt
from gateway.config import EndpointSpec
from gateway.errors import BackendError, BackendUnreachableError, ShuttingDownError
from gateway.tracing import MIGRATE, current_trace

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class FakeReplica:
    address: str
    die_after: int | None = None
    """Tokens it sends before its connection breaks (None: never)."""
    error: BaseException = field(default_factory=lambda: BackendUnreachableError("the connection was lost"))
    requests: list[GenerationRequest] = field(default_factory=list)
    open_streams: int = 0

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def server_ready(self) -> bool:
        return True

    async def list_models(self) -> list[BackendModel]:
        return [BackendModel("m")]

    def abort_all(self, error: Exception) -> int:
        return 0

    async def embed(self, request: Any) -> Any:
        raise NotImplementedError

    def generate(self, request: GenerationRequest) -> FakeStream:
        self.requests.append(request)
        return FakeStream(self, request)


class FakeStream:
    def __init__(self, replica: FakeReplica, request: GenerationRequest) -> None:
        self.replica = replica
        self.request = request
        self.next = len(request.resume_ids)
        self.sent = 0
        self.error: BaseException | None = None
        self.total = int(request.sampling["max_tokens"])
        replica.open_streams += 1
        self.closed = False

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> list[GenerationChunk]:
        replica = self.replica
        if replica.die_after is not None and self.sent >= replica.die_after:
            self.error = replica.error
            raise replica.error
        if self.next >= self.total:
            raise StopAsyncIteration
        i = self.next
        self.next += 1
        self.sent += 1
        last = self.next == self.total
        ids = ((i,),) if self.request.return_token_ids else None
        return [GenerationChunk((f"t{i} ".encode(),), ("length" if last else None,), 7, (1,), None, last, ids)]

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self.replica.open_streams -= 1


async def pool_of(replicas: Mapping[str, FakeReplica], limit: int = 3) -> ReplicaPool:
    specs = [EndpointSpec(a.split(":")[0], int(a.split(":")[1]), False) for a in replicas]
    pool = ReplicaPool(specs, lambda address: replicas[address], Router(Policy.LEAST_LOADED, 16384, 1.25))
    pool.migration_limit = limit
    await pool._discover()
    return pool


def request(tokens: int = 10, *, replay: bool = True) -> GenerationRequest:
    inputs = frozenset({RESUME_TOKEN_IDS, RETURN_TOKEN_IDS}) if replay else frozenset()
    return GenerationRequest("r1", "m", "prompt", {"max_tokens": tokens}, inputs=inputs)


async def read_all(pool: ReplicaPool, req: GenerationRequest) -> tuple[bytes, list[GenerationChunk]]:
    stream = pool.generate(req)
    chunks: list[GenerationChunk] = []
    try:
        async for batch in stream:
            chunks.extend(batch)
    finally:
        await stream.aclose()
    return b"".join(c.text[0] for c in chunks), chunks


def expected(tokens: int) -> bytes:
    return b"".join(f"t{i} ".encode() for i in range(tokens))


async def test_a_stream_cut_mid_way_goes_on_elsewhere_with_nothing_lost_or_repeated() -> None:
    replicas = {"a:1": FakeReplica("a:1", die_after=4), "b:1": FakeReplica("b:1")}
    pool = await pool_of(replicas)
    text, chunks = await read_all(pool, request(10))
    assert text == expected(10)
    assert sum(c.num_output_tokens[0] for c in chunks if c.num_output_tokens) == 10
    moved = replicas["b:1"].requests[-1]
    assert moved.resume_ids == (0, 1, 2, 3) and moved.prompt == "prompt"
    assert moved.sampling["max_tokens"] == 10, "a replayed continuation keeps the request's own limits"
    assert all(r.open_streams == 0 for r in replicas.values())


class Recorder:
    """The pool's observer and a request's trace, as far as a move tells them."""

    def __init__(self) -> None:
        self.moves: list[tuple[str, str, float | None]] = []
        self.events: list[tuple[str, dict[str, str]]] = []

    def __getattr__(self, name: str) -> Any:  # the observer's other reports: not looked at here
        return lambda *args: None

    def migrated(self, replica: str, outcome: str, seconds: float | None) -> None:
        self.moves.append((replica, outcome, seconds))

    def event(self, name: str, at: float | None = None, attributes: dict[str, str] | None = None) -> None:
        self.events.append((name, dict(attributes or {})))


async def test_a_move_is_reported_to_the_metrics_and_the_trace() -> None:
    replicas = {"a:1": FakeReplica("a:1", die_after=4), "b:1": FakeReplica("b:1")}
    pool = await pool_of(replicas)
    recorder = Recorder()
    pool.observer = recorder
    token = current_trace.set(recorder)  # type: ignore[arg-type]
    try:
        await read_all(pool, request(10))
    finally:
        current_trace.reset(token)
    assert [(r, o) for r, o, _ in recorder.moves] == [("a:1", "continued")]
    assert recorder.moves[0][2] is not None and recorder.moves[0][2] >= 0
    moved = [attributes for name, attributes in recorder.events if name == MIGRATE]
    assert moved == [{"gateway.replica": "a:1", "gateway.outcome": "continued", "gateway.tokens": "4"}]


async def test_the_limit_ends_a_stream_that_keeps_failing_with_the_error() -> None:
    replicas = {f"r{i}:1": FakeReplica(f"r{i}:1", die_after=2) for i in range(4)}
    pool = await pool_of(replicas, limit=2)
    stream = pool.generate(request(20))
    got = b""
    with pytest.raises(BackendUnreachableError):
        async for batch in stream:
            got += b"".join(c.text[0] for c in batch)
    await stream.aclose()
    assert got == expected(6), "two moves, two tokens each, then the third failure stands"
    assert all(r.open_streams == 0 for r in replicas.values())


async def test_a_request_error_or_the_gateway_stopping_does_not_move() -> None:
    for error in (BackendError("the model failed"), ShuttingDownError("the gateway is shutting down")):
        replicas = {"a:1": FakeReplica("a:1", die_after=3, error=error), "b:1": FakeReplica("b:1")}
        pool = await pool_of(replicas)
        with pytest.raises(type(error)):
            await read_all(pool, request(10))
        assert len(replicas["b:1"].requests) == 0 or not replicas["b:1"].requests[-1].resume_ids


async def test_one_replica_or_a_zero_limit_hands_off_and_records_nothing() -> None:
    pool = await pool_of({"a:1": FakeReplica("a:1")})
    stream = pool.generate(request(3))
    await stream.__anext__()
    assert stream._produced is None
    await stream.aclose()
    pool = await pool_of({"a:1": FakeReplica("a:1"), "b:1": FakeReplica("b:1")}, limit=0)
    stream = pool.generate(request(3))
    await stream.__anext__()
    assert stream._produced is None and not stream._request.return_token_ids
    await stream.aclose()


async def test_a_text_continuation_reduces_max_tokens_and_keeps_the_first_prompt_count() -> None:
    replicas = {"a:1": FakeReplica("a:1", die_after=3), "b:1": FakeReplica("b:1")}
    pool = await pool_of(replicas)
    stream = pool.generate(request(8, replay=False))
    chunks: list[GenerationChunk] = []
    async for batch in stream:
        chunks.extend(batch)
    await stream.aclose()
    moved = replicas["b:1"].requests[-1]
    assert moved.prompt == "promptt0 t1 t2 " and moved.sampling["max_tokens"] == 5
    assert {c.num_input_tokens for c in chunks} == {7}


def test_reduced_sampling_and_a_character_cut_at_the_end() -> None:
    assert reduced_sampling({"max_tokens": 5, "min_tokens": 3}, 2) == {"max_tokens": 3, "min_tokens": 1}
    assert reduced_sampling({"max_tokens": 5}, 5) is None
    produced = Produced(text=bytearray("héllo ✓".encode()[:-1]), tokens=4)
    continuation = by_text(GenerationRequest("r", "m", "p:", {"max_tokens": 9}), produced)
    assert continuation is not None
    assert continuation.request.prompt == "p:héllo " and continuation.skip_bytes == 2
    constrained = GenerationRequest("r", "m", "p", {"max_tokens": 9, "structured_outputs": "{}"})
    assert by_text(constrained, produced) is None


def test_a_token_continuation_appends_the_generated_ids_to_the_prompt_s() -> None:
    tokens = TokenPrompt((1, 2, 3), end_id=0, pad_id=0)
    request = GenerationRequest("r", "m", "p", {"max_tokens": 10, "min_tokens": 4}, tokens=tokens)
    continuation = by_tokens(request, Produced(ids=[7, 8], tokens=2))
    assert continuation is not None
    assert continuation.request.tokens is not None and continuation.request.tokens.ids == (1, 2, 3, 7, 8)
    assert continuation.request.sampling == {"max_tokens": 8, "min_tokens": 2}
    assert by_tokens(request, Produced(ids=[7], tokens=1, ids_known=False)) is None
