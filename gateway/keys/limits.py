"""Per-key limits: requests per minute, tokens per minute and requests in flight.

Windows are fixed minutes of the wall clock (``WINDOW``): a key's requests and tokens count in the
minute they fall in, and both counts start again at the next minute. Every gateway process and
Redis agree on which minute it is without talking to each other, so the same counters serve one
process (``MemoryLimits``), the workers of one gateway (``FileLimits``: one SQLite file) and
many gateways (``RedisLimits``). The cost is the known one of fixed windows: a key may spend its
budget at the end of one minute and again at the start of the next.

Tokens are charged as a request spends them, prompt and completion together (every half second
while it runs, and the rest when it ends): a stream that runs past the budget is not cut off, and
the key's next request is refused until the window turns.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from gateway.errors import GatewayError
from gateway.keys.policy import KeyPolicy

logger = logging.getLogger("gateway.keys")

WINDOW = 60
"""Seconds of one window, for ``rpm`` and ``tpm`` alike."""

Refusal = Literal["concurrency", "requests", "tokens"]


@dataclass(frozen=True, slots=True)
class Admit:
    """What admission found: whether the request may go on, and the key's counts for headers."""

    refused: Refusal | None
    requests: int
    """Requests counted in this window, this one included when admitted."""
    tokens: int
    """Tokens charged in this window."""
    reset: float
    """Seconds until the window turns."""
    counted: bool = True
    """False when nothing was counted (Redis was down and the gateway fails open): no release."""


UNCOUNTED = Admit(None, 0, 0, 0.0, counted=False)


def decide(policy: KeyPolicy, concurrent: int, requests: int, tokens: int) -> Refusal | None:
    """Which limit refuses a request, given the key's counts before it, or None."""
    if policy.max_concurrent and concurrent >= policy.max_concurrent:
        return "concurrency"
    if policy.rpm and requests >= policy.rpm:
        return "requests"
    if policy.tpm and tokens >= policy.tpm:
        return "tokens"
    return None


def window_of(now: float) -> tuple[int, float]:
    """The window ``now`` falls in, and the seconds left of it."""
    window = int(now // WINDOW)
    return window, (window + 1) * WINDOW - now


def _duration(seconds: float) -> str:
    """OpenAI's reset format: ``1s``, ``6m0s``, ``20ms``."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"


def rate_headers(policy: KeyPolicy, admit: Admit) -> list[tuple[bytes, bytes]]:
    """OpenAI's ``x-ratelimit-*`` headers for the limits the key has (none uncounted)."""
    if not admit.counted:
        return []
    headers: list[tuple[str, str]] = []
    reset = _duration(admit.reset)
    if policy.rpm:
        headers += [
            ("x-ratelimit-limit-requests", str(policy.rpm)),
            ("x-ratelimit-remaining-requests", str(max(0, policy.rpm - admit.requests))),
            ("x-ratelimit-reset-requests", reset),
        ]
    if policy.tpm:
        headers += [
            ("x-ratelimit-limit-tokens", str(policy.tpm)),
            ("x-ratelimit-remaining-tokens", str(max(0, policy.tpm - admit.tokens))),
            ("x-ratelimit-reset-tokens", reset),
        ]
    return [(k.encode(), v.encode()) for k, v in headers]


def retry_after(admit: Admit) -> int:
    """Whole seconds a refused client should wait: the window's end, or 1 for concurrency."""
    return 1 if admit.refused == "concurrency" else max(1, math.ceil(admit.reset))


class LimitUnavailable(GatewayError):
    """The shared counters cannot be reached and the gateway fails closed: 503, so a client
    retries."""

    status_code = 503
    error_type = "service_unavailable"
    default_code = "rate_limiter_unavailable"


class LimitStore(Protocol):
    """Counters of every limited key, by name."""

    async def admit(self, policy: KeyPolicy) -> Admit: ...

    async def release(self, policy: KeyPolicy) -> None: ...

    def charge(self, policy: KeyPolicy, tokens: int) -> None:
        """Add a finished request's tokens (never waits: called on the request's last step)."""

    async def close(self) -> None: ...


class MemoryLimits:
    """One process's counters."""

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}
        """name → [window, requests, tokens, concurrent]."""

    def _row(self, name: str, window: int) -> list[int]:
        row = self._counts.get(name)
        if row is None:
            row = self._counts[name] = [window, 0, 0, 0]
        elif row[0] != window:
            row[0], row[1], row[2] = window, 0, 0
        return row

    async def admit(self, policy: KeyPolicy) -> Admit:
        assert policy.name is not None
        window, reset = window_of(time.time())
        row = self._row(policy.name, window)
        refused = decide(policy, row[3], row[1], row[2])
        if refused is None:
            row[1] += 1
            row[3] += 1
        return Admit(refused, row[1], row[2], reset)

    async def release(self, policy: KeyPolicy) -> None:
        assert policy.name is not None
        row = self._counts.get(policy.name)
        if row is not None:
            row[3] = max(0, row[3] - 1)

    def charge(self, policy: KeyPolicy, tokens: int) -> None:
        assert policy.name is not None
        window, _ = window_of(time.time())
        self._row(policy.name, window)[2] += tokens

    async def close(self) -> None:
        pass


class FileLimits:
    """The counters of every worker of one gateway, in one SQLite file they all open: each
        admission is one ``BEGIN IMMEDIATE`` transaction (SQLite's file lock), so workers count
        exactly together. On the event loop: about 40 µs a step (admission, a charge, the release),
    ~120-150 µs for a request of a limited key on a 2-CPU machine, against ~4 µs in memory; WAL and
    no fsync (the counters matter only while the gateway runs)."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, timeout=5.0, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=OFF")  # counters of the running gateway: nothing to keep
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS key_counts (name TEXT PRIMARY KEY, win INTEGER NOT NULL, "
            "requests INTEGER NOT NULL, tokens INTEGER NOT NULL, concurrent INTEGER NOT NULL)"
        )

    def _row(self, name: str, window: int) -> tuple[int, int, int]:
        row = self._db.execute("SELECT win, requests, tokens, concurrent FROM key_counts WHERE name = ?", (name,))
        found = row.fetchone()
        if found is None:
            self._db.execute("INSERT INTO key_counts VALUES (?, ?, 0, 0, 0)", (name, window))
            return 0, 0, 0
        if found[0] != window:
            self._db.execute("UPDATE key_counts SET win = ?, requests = 0, tokens = 0 WHERE name = ?", (window, name))
            return 0, 0, found[3]
        return found[1], found[2], found[3]

    async def admit(self, policy: KeyPolicy) -> Admit:
        assert policy.name is not None
        window, reset = window_of(time.time())
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            requests, tokens, concurrent = self._row(policy.name, window)
            refused = decide(policy, concurrent, requests, tokens)
            if refused is None:
                requests += 1
                db.execute(
                    "UPDATE key_counts SET requests = requests + 1, concurrent = concurrent + 1 WHERE name = ?",
                    (policy.name,),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return Admit(refused, requests, tokens, reset)

    async def release(self, policy: KeyPolicy) -> None:
        self._db.execute("UPDATE key_counts SET concurrent = MAX(0, concurrent - 1) WHERE name = ?", (policy.name,))

    def charge(self, policy: KeyPolicy, tokens: int) -> None:
        assert policy.name is not None
        window, _ = window_of(time.time())
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            self._row(policy.name, window)
            db.execute("UPDATE key_counts SET tokens = tokens + ? WHERE name = ?", (tokens, policy.name))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        self._db.close()


_ADMIT = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
local window = math.floor(t / 60)
local conc_key = KEYS[1]
local req_key = KEYS[1] .. ':r:' .. window
local tok_key = KEYS[1] .. ':t:' .. window
local max_conc, rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local c = tonumber(redis.call('GET', conc_key) or '0')
local r = tonumber(redis.call('GET', req_key) or '0')
local k = tonumber(redis.call('GET', tok_key) or '0')
local reset = tostring((window + 1) * 60 - t)
local refused = 0
if max_conc > 0 and c >= max_conc then refused = 1
elseif rpm > 0 and r >= rpm then refused = 2
elseif tpm > 0 and k >= tpm then refused = 3 end
if refused == 0 then
  redis.call('INCR', conc_key)
  redis.call('EXPIRE', conc_key, 3600)
  r = redis.call('INCR', req_key)
  redis.call('EXPIRE', req_key, 120)
end
return {refused, r, k, reset}
"""

_CHARGE = """
local now = redis.call('TIME')
local window = math.floor(tonumber(now[1]) / 60)
local tok_key = KEYS[1] .. ':t:' .. window
redis.call('INCRBY', tok_key, ARGV[1])
redis.call('EXPIRE', tok_key, 120)
return 1
"""

_RELEASE = """
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c > 0 then return redis.call('DECR', KEYS[1]) end
return 0
"""

_REFUSALS: tuple[Refusal | None, ...] = (None, "concurrency", "requests", "tokens")


class RedisLimits:
    """Counters shared by every gateway that uses the same Redis: each step is one Lua script
    (atomic in Redis), and the window is Redis's clock (``TIME``), not each pod's.

    Redis down: ``fail="open"`` lets requests through uncounted (a warning at most every 10 s);
    ``"closed"`` refuses them (``LimitUnavailable``, a 503)."""

    def __init__(self, url: str, *, fail: Literal["open", "closed"], timeout: float, prefix: str = "gwkey:") -> None:
        import redis.asyncio

        self._redis: Any = redis.asyncio.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self._fail = fail
        self._prefix = prefix
        self._admit = self._redis.register_script(_ADMIT)
        self._charge = self._redis.register_script(_CHARGE)
        self._release = self._redis.register_script(_RELEASE)
        self._tasks: set[asyncio.Task[None]] = set()
        self._warned = 0.0

    def _warn(self, message: str, *args: object) -> None:
        """A warning at most every 10 s: a Redis that is down would otherwise log every request."""
        now = time.monotonic()
        if now - self._warned > 10:
            self._warned = now
            logger.warning(message, *args)

    def _down(self, exc: Exception) -> None:
        self._warn("key limits: Redis unreachable (%s); failing %s", exc, self._fail)
        if self._fail == "closed":
            raise LimitUnavailable(
                "The rate limiter is unavailable; retry later.", headers={"Retry-After": "1"}
            ) from exc

    async def admit(self, policy: KeyPolicy) -> Admit:
        import redis

        key = self._prefix + str(policy.name)
        try:
            refused, requests, tokens, reset = await self._admit(
                keys=[key], args=[policy.max_concurrent, policy.rpm, policy.tpm]
            )
        except (redis.RedisError, OSError) as exc:
            self._down(exc)
            return UNCOUNTED
        return Admit(_REFUSALS[int(refused)], int(requests), int(tokens), float(reset))

    async def release(self, policy: KeyPolicy) -> None:
        import redis

        try:
            await self._release(keys=[self._prefix + str(policy.name)])
        except (redis.RedisError, OSError) as exc:
            self._warn("key limits: could not release a slot of %s in Redis (%s)", policy.name, exc)

    def charge(self, policy: KeyPolicy, tokens: int) -> None:
        task = asyncio.get_running_loop().create_task(self._send_charge(policy, tokens))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_charge(self, policy: KeyPolicy, tokens: int) -> None:
        import redis

        try:
            await self._charge(keys=[self._prefix + str(policy.name)], args=[tokens])
        except (redis.RedisError, OSError) as exc:
            self._warn("key limits: could not charge %d tokens to %s in Redis (%s)", tokens, policy.name, exc)

    async def close(self) -> None:
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=1.0)
        await self._redis.aclose()
