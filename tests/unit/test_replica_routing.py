"""Replica routing logic: endpoints, the bounded-load ring, the policies, and the pool's ejection
and retry rules, over in-memory backends (the real three-Triton behaviour is in
tests/integration/test_replicas.py)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
from collections.abc import AsyncGenerator
from pathlib import Path

import httpx
import pytest

from gateway.app import create_app
from gateway.backend.replicas.endpoints import resolve
from gateway.backend.replicas.engine_load import EngineLoad, replica_load
from gateway.backend.replicas.pool import ReplicaPool
from gateway.backend.replicas.prefixes import PrefixTable, block_hashes
from gateway.backend.replicas.ring import HashRing, bounded_choice
from gateway.backend.replicas.router import PREFIX_MIN_BOUND, SESSION_MIN_BOUND, Policy, Route, Router
from gateway.backend.types import GenerationChunk, GenerationRequest, Placement
from gateway.config import EndpointSpec, Settings, parse_endpoints
from gateway.errors import BackendUnavailableError, BackendUnreachableError, InvalidRequestError
from tests.fakes import ScriptedBackend, text_chunks
from tests.unit.test_app import chat, make_repo


@dataclasses.dataclass(eq=False)
class Member:
    """A router candidate: an address and a load (the pool's ``replica_load`` score)."""

    address: str
    load: float = 0.0


# -- endpoints -------------------------------------------------------------------------------


def test_endpoints_parse_fixed_and_dns_entries_once_each() -> None:
    specs = parse_endpoints("a:1, dns:///svc.ns:8001,a:1,[::1]:9")
    assert specs == (EndpointSpec("a", 1, False), EndpointSpec("svc.ns", 8001, True), EndpointSpec("[::1]", 9, False))


@pytest.mark.anyio
async def test_dns_entry_resolves_to_every_address_and_fixed_entry_to_itself() -> None:
    assert await resolve(EndpointSpec("localhost", 8001, True)) in (
        ["127.0.0.1:8001"],
        ["127.0.0.1:8001", "[::1]:8001"],
    )
    assert await resolve(EndpointSpec("name.invalid", 8001, True)) is None
    assert await resolve(EndpointSpec("name.invalid", 8001, False)) == ["name.invalid:8001"]


# -- the ring ----------------------------------------------------------------------------------


def test_ring_prefers_every_member_once_and_spreads_keys_evenly() -> None:
    members = [Member(f"10.0.0.{i}:8001") for i in range(3)]
    ring = HashRing(members, lambda m: m.address)
    counts: collections.Counter[str] = collections.Counter()
    for k in range(3000):
        order = list(ring.preference(f"session-{k}"))
        assert sorted(m.address for m in order) == sorted(m.address for m in members)
        counts[order[0].address] += 1
    assert all(800 <= c <= 1200 for c in counts.values()), counts


def test_removing_a_member_moves_only_its_keys_and_they_come_back() -> None:
    members = [Member(f"r{i}:1") for i in range(3)]
    full = HashRing(members, lambda m: m.address)
    without = HashRing(members[:2], lambda m: m.address)
    keys = [f"k{i}" for i in range(500)]
    before = {k: next(full.preference(k)).address for k in keys}
    after = {k: next(without.preference(k)).address for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all(before[k] == "r2:1" for k in moved)
    rebuilt = HashRing(members, lambda m: m.address)
    assert {k: next(rebuilt.preference(k)).address for k in keys} == before


def test_bounded_load_spills_a_hot_key_to_its_next_member() -> None:
    members = [Member("a:1"), Member("b:1"), Member("c:1")]
    ring = HashRing(members, lambda m: m.address)
    preference = list(ring.preference("hot"))
    home, second = preference[0], preference[1]
    assert bounded_choice(preference, members, lambda m: m.load, 1.25, SESSION_MIN_BOUND) == (home, True)
    home.load = 3  # under the floor: a light load never spills
    assert bounded_choice(preference, members, lambda m: m.load, 1.25, SESSION_MIN_BOUND) == (home, True)
    home.load = 8  # bound = max(SESSION_MIN_BOUND = 8, ceil(1.25 * 9 / 3) = 4)
    assert bounded_choice(preference, members, lambda m: m.load, 1.25, SESSION_MIN_BOUND) == (second, False)
    second.load = 8  # bound = max(8, ceil(1.25 * 17 / 3) = 8): the third is the first under it
    assert bounded_choice(preference, members, lambda m: m.load, 1.25, SESSION_MIN_BOUND) == (preference[2], False)


def test_bounded_load_takes_an_idle_home_even_with_a_factor_of_one() -> None:
    members = [Member("a:1"), Member("b:1")]
    preference = list(HashRing(members, lambda m: m.address).preference("k"))
    assert bounded_choice(preference, members, lambda m: m.load, 1.0, SESSION_MIN_BOUND)[0] is preference[0]


# -- the policies ------------------------------------------------------------------------------


def test_affinity_routes_by_session_then_prefix_then_load() -> None:
    members = [Member("a:1"), Member("b:1"), Member("c:1")]
    router = Router(Policy.AFFINITY, prefix_chars=4096, load_factor=1.25)
    router.set_members(members)
    keyed = router.choose("conversation-1", "whatever", members)
    assert keyed is not None and keyed.route is Route.SESSION and keyed.home is True
    assert all(router.choose("conversation-1", f"p{i}", members).replica is keyed.replica for i in range(20))  # type: ignore[union-attr]
    system = "S" * 600
    first = router.choose(None, system + "question one", members)
    assert first is not None and first.route is Route.LEAST_LOADED  # nothing seen yet: load places it
    again = [router.choose(None, system + tail, members) for tail in ("question two", "question three")]
    assert [(c.route, c.replica, c.home) for c in again if c] == [(Route.PREFIX, first.replica, True)] * 2
    assert router.choose(None, "short", members).route is Route.LEAST_LOADED  # type: ignore[union-attr]
    members[0].load, members[1].load = 3, 1
    unkeyed = router.choose(None, "", members)
    assert unkeyed is not None and unkeyed.route is Route.LEAST_LOADED and unkeyed.replica is members[2]


def test_a_lone_replica_skips_the_prefix_route_until_a_second_one_is_known() -> None:
    lone = [Member("a:1")]
    router = Router(Policy.AFFINITY, prefix_chars=4096, load_factor=1.25)
    router.set_members(lone)
    prompt = "S" * 600 + "question"
    routes = [router.choose(None, prompt, lone).route for _ in range(2)]  # type: ignore[union-attr]
    assert routes == [Route.LEAST_LOADED, Route.LEAST_LOADED]  # not remembered: no prefix hit either time
    assert router.choose("conversation-1", prompt, lone).route is Route.SESSION  # type: ignore[union-attr]
    pair = [*lone, Member("b:1")]
    router.set_members(pair)
    first = router.choose(None, prompt, pair)
    assert first is not None and first.route is Route.LEAST_LOADED  # nothing remembered from the lone time
    again = router.choose(None, prompt, pair)
    assert again is not None and (again.route, again.replica) == (Route.PREFIX, first.replica)


def test_prefix_policy_ignores_the_session_key_and_round_robin_takes_turns() -> None:
    members = [Member("a:1"), Member("b:1"), Member("c:1")]
    prefix = Router(Policy.PREFIX, 4096, 1.25)
    prefix.set_members(members)
    prefix.choose("session", "p" * 300, members)
    assert prefix.choose("session", "p" * 300, members).route is Route.PREFIX  # type: ignore[union-attr]
    turns = Router(Policy.ROUND_ROBIN, 1024, 1.25)
    picks = [turns.choose("s", "p", members).replica.address for _ in range(6)]  # type: ignore[union-attr]
    assert picks == ["a:1", "b:1", "c:1"] * 2


def test_least_loaded_rotates_ties() -> None:
    members = [Member("a:1"), Member("b:1")]
    router = Router(Policy.LEAST_LOADED, 1024, 1.25)
    picks = {router.choose("s", "p", members).replica.address for _ in range(4)}  # type: ignore[union-attr]
    assert picks == {"a:1", "b:1"}


def test_prefix_route_follows_the_longest_match_and_spreads_a_shared_system_prompt_by_load() -> None:
    members = [Member("a:1"), Member("b:1"), Member("c:1")]
    router = Router(Policy.PREFIX, 1 << 16, 1.0)
    router.set_members(members)
    system = "You are a helpful assistant. " * 40  # ~1.2k characters, shared by every conversation
    homes = {}
    for conversation in range(2 * PREFIX_MIN_BOUND + 1):
        member = router.choose(None, system + f"conversation {conversation} " * 30, members).replica  # type: ignore[union-attr]
        member.load += 1  # type: ignore[misc]  # still running: the next one is placed by load too
        homes[conversation] = member.address
    # The warm replica takes conversations up to the load bound, then the least busy one warms up.
    assert sorted(collections.Counter(homes.values()).values()) == [1, PREFIX_MIN_BOUND, PREFIX_MIN_BOUND]
    for member in members:
        member.load = 0
    for conversation, home in homes.items():  # later turns: the whole earlier turn is a prefix
        turn = system + f"conversation {conversation} " * 30 + "answer and the next question " * 20
        choice = router.choose(None, turn, members)
        assert choice is not None and (choice.replica.address, choice.route, choice.home) == (home, Route.PREFIX, True)


def test_prefix_table_forgets_a_prompts_tail_before_its_head() -> None:
    table = PrefixTable(capacity=4)
    first = block_hashes("a" * 256 * 3)
    table.add(first)
    table.add(block_hashes("b" * 256 * 2))
    assert table.matched(first) == 2 and len(table) == 4


# -- routing by engine load ---------------------------------------------------------------------


def test_a_session_leaves_a_replica_busy_with_other_clients_only_at_the_bound() -> None:
    """This gateway has nothing in flight on the session's replica; its engine is busy with
    other pods' requests. The turn stays home below the bound (8 with three idle replicas) and
    moves at it, whether the load is running requests, a queue (double) or a fuller cache."""
    members = [Member("a:1"), Member("b:1"), Member("c:1")]
    router = Router(Policy.AFFINITY, 4096, 1.25)
    router.set_members(members)
    home = router.choose("conversation-1", "turn", members)
    assert home is not None and home.home is True
    replica = home.replica
    stays = [EngineLoad(7.0, 0.0, None), EngineLoad(4.0, 1.0, None), EngineLoad(4.0, 0.0, 0.75)]
    moves = [EngineLoad(8.0, 0.0, None), EngineLoad(4.0, 2.0, None), EngineLoad(5.0, 0.0, 0.6)]
    for engine in stays:
        replica.load = replica_load(0, engine, True)  # type: ignore[misc]
        choice = router.choose("conversation-1", "next turn", members)
        assert choice is not None and (choice.replica, choice.home) == (replica, True), engine
    for engine in moves:
        replica.load = replica_load(0, engine, True)  # type: ignore[misc]
        choice = router.choose("conversation-1", "next turn", members)
        assert choice is not None and choice.replica is not replica and choice.home is False, engine


def test_least_loaded_picks_the_lowest_score_not_the_fewest_in_flight() -> None:
    quiet_here = Member("a:1", replica_load(3, None, True))  # 3 of ours, no metrics: 3
    busy_elsewhere = Member("b:1", replica_load(0, EngineLoad(5.0, 0.0, None), True))  # none of ours: 5
    queueing = Member("c:1", replica_load(1, EngineLoad(1.0, 1.0, 0.5), True))  # (2 + 1) x 1.5 = 4.5
    members = [busy_elsewhere, queueing, quiet_here]
    router = Router(Policy.LEAST_LOADED, 1024, 1.25)
    assert {router.choose(None, "", members).replica for _ in range(6)} == {quiet_here}  # type: ignore[union-attr]
    quiet_here.load = replica_load(3, None, False)  # its metrics stopped answering: 7
    assert {router.choose(None, "", members).replica for _ in range(6)} == {queueing}  # type: ignore[union-attr]


@dataclasses.dataclass(eq=False)
class Simulated:
    """A replica in a closed-loop simulation: this gateway's requests (the tick each one ends),
    another pod's steady requests, and the engine numbers as last read."""

    address: str
    others: float
    ends: list[int] = dataclasses.field(default_factory=list)
    engine: EngineLoad | None = None

    @property
    def load(self) -> float:
        return replica_load(len(self.ends), self.engine, True)


def closed_loop(*, read_engine: bool, clients: int = 12, others_on_b: float = 6.0) -> collections.Counter[str]:
    """Each client sends its next request when the last ends (4 ticks; the clients start a quarter
    a tick, so about as many end in every tick); the engines are read once a tick, before that
    tick's requests are placed (so the numbers are up to a tick old)."""
    a, b = Simulated("a:1", 0.0), Simulated("b:1", others_on_b)
    members = [a, b]
    by_address = {m.address: m for m in members}
    router = Router(Policy.LEAST_LOADED, 1024, 1.25)
    router.set_members(members)
    placed: collections.Counter[str] = collections.Counter()
    ready = 0
    for tick in range(400):
        ready += clients // 4 if tick < 4 else 0
        for member in members:
            ready += sum(1 for end in member.ends if end <= tick)
            member.ends = [end for end in member.ends if end > tick]
            member.engine = EngineLoad(len(member.ends) + member.others, 0.0, None) if read_engine else None
        for _ in range(ready):
            choice = router.choose(None, "", members)
            assert choice is not None
            by_address[choice.replica.address].ends.append(tick + 4)
            placed[choice.replica.address] += 1
        ready = 0
    return placed


def test_a_replica_with_twice_the_load_gets_fewer_new_requests_in_a_closed_loop() -> None:
    """12 clients of this gateway; b also runs 6 requests of another pod. By in-flight counts
    alone both look alike and share evenly, so b runs 12 to a's 6. By engine load the scores
    even out instead (a 9, b 3 + 6): b gets a third as many new requests."""
    blind = closed_loop(read_engine=False)
    assert abs(blind["a:1"] - blind["b:1"]) <= 0.02 * sum(blind.values()), blind
    seen = closed_loop(read_engine=True)
    assert seen["b:1"] < seen["a:1"] / 2, seen
    assert sum(seen.values()) == sum(blind.values())  # a closed loop: as many requests either way


# -- the pool ----------------------------------------------------------------------------------


class FailingBackend(ScriptedBackend):
    """Refuses every call the way an unreachable Triton does (or with ``error``)."""

    def __init__(self, error: Exception | None = None, *, after_first: bool = False) -> None:
        super().__init__(chunks=text_chunks(b"x"))
        self.error = error or BackendUnreachableError("Triton is unavailable: cannot connect")
        self.after_first = after_first
        self.calls = 0

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[GenerationChunk], None]:
        self.calls += 1
        if self.after_first:
            yield [text_chunks(b"partial", reason="")[0]]
        raise self.error


def request(session: str | None = "s1", model: str = "m") -> GenerationRequest:
    return GenerationRequest("r", model, "prompt", {}, session_key=session, placement=Placement())


async def pool_of(backends: dict[str, ScriptedBackend], policy: Policy = Policy.AFFINITY) -> ReplicaPool:
    pool = ReplicaPool(
        parse_endpoints(",".join(backends)), lambda address: backends[address], Router(policy, 1024, 1.25)
    )
    await pool._discover()  # no housekeeping task: the test drives time
    return pool


async def drain(pool: ReplicaPool, req: GenerationRequest) -> list[GenerationChunk]:
    """Every chunk, closing the stream after (as every consumer must: it frees the replica)."""
    async with contextlib.aclosing(pool.generate(req)) as stream:
        return [chunk async for batch in stream for chunk in batch]


@pytest.mark.anyio
async def test_a_replica_that_cannot_be_reached_is_ejected_and_the_request_retried_once() -> None:
    backends: dict[str, ScriptedBackend] = {
        "a:1": ScriptedBackend(text_chunks(b"ok")),
        "b:1": ScriptedBackend(text_chunks(b"ok")),
    }
    pool = await pool_of(backends)
    home = next(pool.router._ring.preference("s\0s1")).address  # type: ignore[attr-defined]
    backends[home] = dead = FailingBackend()
    pool._replicas[home].backend = dead
    req = request()
    assert b"".join(c.text[0] for c in await drain(pool, req)) == b"ok"
    assert req.placement is not None and req.placement.replica != home
    assert dead.calls == 1 and pool._replicas[home].up is False
    await drain(pool, request())  # ejected: not tried again until a probe brings it back
    assert dead.calls == 1


@pytest.mark.anyio
async def test_a_request_that_streamed_is_never_retried() -> None:
    backends: dict[str, ScriptedBackend] = {
        "a:1": FailingBackend(after_first=True),
        "b:1": FailingBackend(after_first=True),
    }
    pool = await pool_of(backends)
    req = request()
    with pytest.raises(BackendUnreachableError):
        await drain(pool, req)
    assert sum(b.calls for b in backends.values()) == 1  # type: ignore[attr-defined]
    # Unreachable mid-stream: out of rotation, and its slot freed.
    failed = pool._replicas[req.placement.replica]  # type: ignore[union-attr,index]
    assert failed.up is False and failed.in_flight == 0
    assert [r.up for r in pool.replicas].count(True) == 1


@pytest.mark.anyio
async def test_a_request_error_is_not_retried_and_ejects_nothing() -> None:
    backends: dict[str, ScriptedBackend] = {
        "a:1": FailingBackend(InvalidRequestError("bad")),
        "b:1": FailingBackend(InvalidRequestError("bad")),
    }
    pool = await pool_of(backends)
    with pytest.raises(InvalidRequestError):
        await drain(pool, request())
    assert sum(b.calls for b in backends.values()) == 1  # type: ignore[attr-defined]
    assert all(r.up for r in pool.replicas)


@pytest.mark.anyio
async def test_model_missing_on_a_replica_is_retried_without_ejecting_it() -> None:
    missing = FailingBackend(BackendUnavailableError("unknown model"))
    backends: dict[str, ScriptedBackend] = {"a:1": missing, "b:1": ScriptedBackend(text_chunks(b"ok"))}
    pool = await pool_of(backends, Policy.ROUND_ROBIN)
    await pool.list_models()
    await drain(pool, request())
    await drain(pool, request())  # not sent there again until its model list says it has it
    assert missing.calls == 1 and all(r.up for r in pool.replicas)
    await pool.list_models()
    await drain(pool, request())
    await drain(pool, request())
    assert missing.calls == 2


@pytest.mark.anyio
async def test_requests_go_only_to_replicas_that_list_the_model() -> None:
    backends: dict[str, ScriptedBackend] = {
        "a:1": ScriptedBackend(text_chunks(b"a"), models=("m",)),
        "b:1": ScriptedBackend(text_chunks(b"b"), models=("m", "other")),
    }
    pool = await pool_of(backends, Policy.ROUND_ROBIN)
    assert sorted(m.name for m in await pool.list_models()) == ["m", "other"]
    for _ in range(4):
        req = request(model="other")
        await drain(pool, req)
        assert req.placement is not None and req.placement.replica == "b:1"


@pytest.mark.anyio
async def test_an_ejected_replica_returns_after_a_successful_probe() -> None:
    backends: dict[str, ScriptedBackend] = {
        "a:1": ScriptedBackend(text_chunks(b"a")),
        "b:1": ScriptedBackend(text_chunks(b"b")),
    }
    pool = await pool_of(backends)
    replica = pool._replicas["a:1"]
    backends["a:1"].ready = False
    assert await pool.server_ready() is True  # b is ready; a is ejected by asking
    assert replica.up is False and replica.failures == 1
    backends["a:1"].ready = True
    await pool._probe(replica)
    assert replica.up is True
    backends["a:1"].ready = False  # flaps: down again at once, so it waits twice as long
    await pool.server_ready()
    assert replica.up is False and replica.failures == 2
    replica.up_since -= 60  # had it stayed up long enough, the count would start over
    backends["a:1"].ready = True
    await pool._probe(replica)
    replica.up_since -= 60
    backends["a:1"].ready = False
    await pool.server_ready()
    assert replica.failures == 1


@pytest.mark.anyio
async def test_with_every_replica_ejected_requests_still_try_them() -> None:
    backends: dict[str, ScriptedBackend] = {"a:1": ScriptedBackend(text_chunks(b"a"), ready=False)}
    pool = await pool_of(backends)
    assert await pool.server_ready() is False
    assert pool.replicas[0].up is False
    assert b"".join(c.text[0] for c in await drain(pool, request())) == b"a"


@pytest.mark.anyio
async def test_in_flight_counts_follow_the_generation() -> None:
    gate = asyncio.Event()

    class Slow(ScriptedBackend):
        async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[GenerationChunk], None]:
            await gate.wait()
            yield text_chunks(b"x")

    pool = await pool_of({"a:1": Slow()})
    task = asyncio.ensure_future(drain(pool, request()))
    await asyncio.sleep(0.01)
    assert pool.replicas[0].in_flight == 1
    gate.set()
    await task
    assert pool.replicas[0].in_flight == 0


@pytest.mark.anyio
async def test_a_stream_that_ended_or_failed_stays_ended_until_closed() -> None:
    """As an async generator does: asking again places nothing anew, and closing frees the slot."""
    empty = ScriptedBackend(())
    pool = await pool_of({"a:1": empty})
    stream = pool.generate(request())
    for _ in range(2):
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
    assert len(empty.requests) == 1 and pool.replicas[0].in_flight == 1
    await stream.aclose()
    assert pool.replicas[0].in_flight == 0

    failing = FailingBackend(InvalidRequestError("bad"))
    pool = await pool_of({"a:1": failing})
    stream = pool.generate(request())
    with pytest.raises(InvalidRequestError):
        await anext(stream)
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    assert failing.calls == 1 and isinstance(stream.error, InvalidRequestError)
    await stream.aclose()
    assert pool.replicas[0].in_flight == 0 and pool.replicas[0].up


@pytest.mark.anyio
async def test_dns_changes_add_replicas_and_retire_gone_ones_once_their_streams_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers: dict[str, list[str] | None] = {"svc": ["10.0.0.1:8001", "10.0.0.2:8001"]}

    async def fake_resolve(spec: EndpointSpec) -> list[str] | None:
        found = answers[spec.host]
        return None if found is None else list(found)

    monkeypatch.setattr("gateway.backend.replicas.pool.resolve", fake_resolve)
    backends: dict[str, ScriptedBackend] = {}

    def connect(address: str) -> ScriptedBackend:
        backends[address] = ScriptedBackend(text_chunks(address.encode()))
        return backends[address]

    pool = ReplicaPool(parse_endpoints("dns:///svc:8001"), connect, Router(Policy.ROUND_ROBIN, 1024, 1.25))
    await pool._discover()
    assert sorted(r.address for r in pool.replicas) == ["10.0.0.1:8001", "10.0.0.2:8001"]
    leaving = pool._replicas["10.0.0.1:8001"]
    leaving.in_flight = 1  # a stream still running there
    answers["svc"] = ["10.0.0.2:8001", "10.0.0.3:8001"]
    await pool._discover()
    assert leaving.retired and "10.0.0.1:8001" in pool._replicas  # kept until its stream ends
    placed = set()
    for _ in range(4):
        req = request()
        await drain(pool, req)
        placed.add(req.placement.replica)  # type: ignore[union-attr]
    assert placed == {"10.0.0.2:8001", "10.0.0.3:8001"}
    leaving.in_flight = 0
    await pool._discover()
    assert sorted(pool._replicas) == ["10.0.0.2:8001", "10.0.0.3:8001"]
    answers["svc"] = None  # a failed lookup (a DNS blip) keeps the replicas it knew
    await pool._discover()
    assert sorted(r.address for r in pool.replicas if not r.retired) == ["10.0.0.2:8001", "10.0.0.3:8001"]


@pytest.mark.anyio
async def test_answers_and_errors_say_which_replica_ran_them(tmp_path: Path) -> None:
    """Through the real app: a whole answer and a stream carry the placement headers, and a 503
    after the retry names the replica that failed last."""
    repo = make_repo(tmp_path)
    backends: dict[str, ScriptedBackend] = {"a:1": ScriptedBackend(text_chunks(b"ok")), "b:1": FailingBackend()}
    pool = await pool_of(backends, Policy.ROUND_ROBIN)
    app = create_app(Settings(model_repository=[repo], first_response_wait=1.0), backend=pool)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            for stream in (False, True):
                ok = await client.post("/v1/chat/completions", json=chat(stream=stream))
                assert ok.status_code == 200, ok.text
                assert (ok.headers["x-gateway-replica"], ok.headers["x-gateway-route"]) == ("a:1", "round_robin")
            backends["a:1"] = FailingBackend()
            pool._replicas["a:1"].backend = backends["a:1"]
            for replica in pool.replicas:
                replica.up = True
            failed = await client.post("/v1/chat/completions", json=chat())
    assert failed.status_code == 503 and failed.json()["error"]["type"] == "service_unavailable"
    assert failed.headers["x-gateway-replica"] in ("a:1", "b:1")
