"""Concurrency slots as leases, and the workers' file off the event loop.

A process killed with requests in flight (a real subprocess holding leases in a real Redis, or in
the workers' SQLite file, killed with SIGKILL) gives its key's slots back within the lease's ttl,
and keeps them while it lives, past the ttl, by renewing. A busy SQLite file (another connection
holding its write lock) is the store being unavailable: ``LimitUnavailable`` when failing
closed (a 503 at the edge), an uncounted admission when open, never a ``sqlite3`` error, and
the event loop runs on while the file is waited for; a charge never raises and is written once
the lock goes."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from gateway.http.security import ApiKeyMiddleware
from gateway.keys.counts import UNCOUNTED, LimitUnavailable, Step
from gateway.keys.file_limits import FileLimits
from gateway.keys.policy import KeyPolicy, KeyRing, hash_key
from gateway.keys.redis_limits import RedisLimits
from tests.redis_server import RedisServer

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
TTL = 2.0
"""The lease ttl of these tests: a dead holder's slots must be back within it (plus the poll)."""
SLACK = 5.0
"""Seconds past the ttl a slot may take to be seen free on a busy machine (polling, scheduling)."""

HOLDER = """
import asyncio, sys
from pathlib import Path
from gateway.keys.file_limits import FileLimits
from gateway.keys.policy import KeyPolicy
from gateway.keys.redis_limits import RedisLimits

async def main() -> None:
    kind, where, slots, ttl = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    if kind == "redis":
        store = RedisLimits(where, fail="closed", timeout=2.0, lease_ttl=ttl)
    else:
        store = FileLimits(Path(where), fail="closed", timeout=2.0, lease_ttl=ttl)
    policy = KeyPolicy("team", max_concurrent=slots)
    for _ in range(slots):
        assert (await store.admit(policy)).lease is not None
    print("held", flush=True)
    await asyncio.Event().wait()  # requests in flight, never released: renewed until killed

asyncio.run(main())
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


def start_holder(kind: str, where: str, slots: int) -> subprocess.Popen[bytes]:
    """A process that takes ``slots`` slots of key ``team`` and holds them until it is killed."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, kind, where, str(slots), str(TTL)], cwd=ROOT, stdout=subprocess.PIPE
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == b"held\n", "the holder did not take its slots"
    return holder


async def eventually(condition: Callable[[], Any], timeout: float) -> float:
    """Seconds until ``condition()`` (awaited if it is a coroutine) is true; fails after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return time.monotonic() - start
        await asyncio.sleep(0.05)
    raise AssertionError(f"not true within {timeout} s")


async def check_killed_holder_gives_slots_back(
    store: Any, holder: subprocess.Popen[bytes], expiries: Callable[[], list[float]], now: Callable[[], float]
) -> None:
    """While the holder lives, its leases outlive their first expiry (renewed) and the key is
    full; killed, its slots are free within the ttl."""
    policy = KeyPolicy("team", max_concurrent=2)
    try:
        first = expiries()
        assert len(first) == 2
        await eventually(lambda: now() > max(first) + 0.2, timeout=TTL + 30)
        renewed = expiries()
        assert len(renewed) == 2 and min(renewed) > max(first), "a live holder renews its leases"
        assert (await store.admit(policy)).refused == "concurrency"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)

    async def admitted() -> bool:
        admit = await store.admit(policy)
        if admit.refused is None:
            await store.release(policy, admit)
        return admit.refused is None

    waited = await eventually(admitted, timeout=TTL + 60)
    assert waited <= TTL + SLACK, f"slots came back after {waited:.1f} s, the bound is the ttl ({TTL} s)"
    both = [await store.admit(policy) for _ in range(3)]
    assert [a.refused for a in both] == [None, None, "concurrency"]  # both of its slots, not one
    for admit in both:
        await store.release(policy, admit)


async def test_a_killed_process_gives_its_redis_slots_back_within_the_lease_ttl(redis_server: RedisServer) -> None:
    import redis

    holder = start_holder("redis", redis_server.url, 2)
    peek = redis.Redis.from_url(redis_server.url)
    store = RedisLimits(redis_server.url, fail="closed", timeout=2.0, lease_ttl=TTL)

    def redis_now() -> float:
        seconds, micros = peek.time()
        return float(seconds) + micros / 1e6

    def expiries() -> list[float]:
        pairs: Any = peek.zrange("gwkey:team:leases", 0, -1, withscores=True)
        return [float(score) for _, score in pairs]

    try:
        await check_killed_holder_gives_slots_back(store, holder, expiries, redis_now)
    finally:
        await store.close()
        peek.close()


async def test_a_killed_worker_gives_its_file_slots_back_within_the_lease_ttl(tmp_path: Path) -> None:
    path = tmp_path / "limits.sqlite"
    holder = start_holder("file", str(path), 2)
    store = FileLimits(path, fail="closed", timeout=2.0, lease_ttl=TTL)
    peek = sqlite3.connect(path, isolation_level=None)
    try:
        await check_killed_holder_gives_slots_back(
            store, holder, lambda: [row[0] for row in peek.execute("SELECT expires FROM key_leases")], time.time
        )
    finally:
        peek.close()
        await store.close()


async def test_a_released_slot_is_gone_from_the_store_at_once(redis_server: RedisServer, tmp_path: Path) -> None:
    import redis

    policy = KeyPolicy("team", max_concurrent=1)
    path = tmp_path / "limits.sqlite"
    for store in (
        RedisLimits(redis_server.url, fail="closed", timeout=2.0, lease_ttl=TTL),
        FileLimits(path, fail="closed", lease_ttl=TTL),
    ):
        admit = await store.admit(policy)
        await store.release(policy, admit)
        assert (await store.admit(policy)).refused is None  # at once, not after the ttl
        await store.close()  # holding that one
    peek = redis.Redis.from_url(redis_server.url)
    assert peek.zcard("gwkey:team:leases") == 0  # a store that closes gives back what it held
    peek.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM key_leases").fetchone() == (0,)


# -- a busy or broken file ---------------------------------------------------------------------------


@pytest.fixture
async def busy_file(tmp_path: Path) -> AsyncIterator[tuple[Path, sqlite3.Connection]]:
    """A key limits file in use, and another connection holding its write lock."""
    path = tmp_path / "limits.sqlite"
    ready = FileLimits(path)
    await ready.admit(KeyPolicy("team", rpm=100))  # the file and its tables exist, in WAL mode
    await ready.close()
    locker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    locker.execute("BEGIN EXCLUSIVE")
    yield path, locker
    if locker.in_transaction:
        locker.execute("ROLLBACK")
    locker.close()


async def test_a_busy_file_fails_closed_as_unavailable_without_blocking_the_loop(
    busy_file: tuple[Path, sqlite3.Connection],
) -> None:
    path, locker = busy_file
    failures: list[Step] = []
    store = FileLimits(path, fail="closed", timeout=0.5, on_failure=failures.append)
    admitting = asyncio.create_task(store.admit(KeyPolicy("team", rpm=100)))
    await asyncio.sleep(0)  # the admission starts: on a thread, the loop comes back here at once
    assert not admitting.done()
    with pytest.raises(LimitUnavailable) as refused:
        await admitting
    assert (refused.value.status_code, refused.value.code) == (503, "rate_limiter_unavailable")
    assert refused.value.headers == {"Retry-After": "1"}
    assert failures == ["admit"]
    await store.close()


async def test_a_busy_file_fails_open_uncounted(busy_file: tuple[Path, sqlite3.Connection]) -> None:
    path, _ = busy_file
    store = FileLimits(path, fail="open", timeout=0.2)
    assert await store.admit(KeyPolicy("team", rpm=1)) == UNCOUNTED
    await store.close()


async def test_a_charge_while_the_file_is_busy_never_raises_and_is_written_later(
    busy_file: tuple[Path, sqlite3.Connection],
) -> None:
    path, locker = busy_file
    failures: list[Step] = []
    store = FileLimits(path, fail="closed", timeout=0.2, on_failure=failures.append)
    policy = KeyPolicy("team", tpm=100)
    store.charge(policy, 70)  # on a stream's last step: returns at once
    await eventually(lambda: failures == ["charge"], timeout=30)
    locker.execute("ROLLBACK")
    store.charge(policy, 40)  # the next charge writes both
    assert (await store.admit(policy)).refused == "tokens"
    assert (await store.admit(KeyPolicy("team", rpm=10, tpm=1000))).tokens == 110
    await store.close()


async def test_a_file_that_cannot_be_opened_is_unavailable(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    store = FileLimits(directory, fail="closed")
    with pytest.raises(LimitUnavailable):
        await store.admit(KeyPolicy("team", rpm=1))
    store.charge(KeyPolicy("team", tpm=1), 5)  # never raises
    await store.release(KeyPolicy("team", max_concurrent=1), UNCOUNTED)
    await store.close()


# -- at the edge -------------------------------------------------------------------------------------


class Ok:
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


async def post(app: Any, path: str = "/v1/chat/completions") -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        return await client.post(path, headers={"Authorization": "Bearer sk-a"}, content=b"{}")


def edge(tmp_path: Path, limits: Any, rules: str) -> ApiKeyMiddleware:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[[key]]\nname = "team"\nsha256 = "{hash_key("sk-a")}"\n{rules}\n')
    return ApiKeyMiddleware(Ok(), KeyRing((), keys), limits=limits)


async def test_a_busy_file_is_a_503_when_closed_and_admitted_when_open(
    busy_file: tuple[Path, sqlite3.Connection], tmp_path: Path
) -> None:
    path, _ = busy_file
    closed = FileLimits(path, fail="closed", timeout=0.2)
    refused = await post(edge(tmp_path, closed, "rpm = 5"))
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "rate_limiter_unavailable"
    assert refused.headers["retry-after"] == "1"
    opened = FileLimits(path, fail="open", timeout=0.2)
    admitted = await post(edge(tmp_path, opened, "rpm = 5"))
    assert admitted.status_code == 200 and "x-ratelimit-limit-requests" not in admitted.headers
    await closed.close()
    await opened.close()


@pytest.mark.parametrize("path", ["/tokenize", "/v1/messages/count_tokens", "/v1/responses/input_tokens"])
async def test_counting_endpoints_count_against_rpm_only(tmp_path: Path, path: str) -> None:
    from gateway.keys.limits import MemoryLimits

    limits = MemoryLimits()
    app = edge(tmp_path, limits, "rpm = 3\ntpm = 10\nmax_concurrent = 1")
    policy = KeyPolicy("team", rpm=3, tpm=10, max_concurrent=1)
    running = await limits.admit(policy)  # the one slot taken by a generation
    limits.charge(policy, 50)  # and the tokens spent
    counted = await post(app, path)
    assert counted.status_code == 200  # neither the slot nor the tokens refuse a count
    remaining = (
        "anthropic-ratelimit-requests-remaining"
        if path.startswith("/v1/messages")
        else "x-ratelimit-remaining-requests"
    )
    assert counted.headers[remaining] == "1"
    assert (await post(app, path)).status_code == 200
    over = await post(app, path)
    assert over.status_code == 429 and "requests per minute" in over.text
    assert (await post(app, "/detokenize")).status_code == 200  # not a count: not limited
    await limits.release(policy, running)
