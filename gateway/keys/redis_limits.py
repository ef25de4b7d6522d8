"""The counts shared by every gateway that uses the same Redis (all pods).

Each step is one Lua script (atomic in Redis) and the window and the leases' expiries are
Redis's clock (``TIME``), not each pod's. Per key name: ``gwkey:<name>:r:<minute>`` and
``gwkey:<name>:t:<minute>`` (the window's requests and tokens, expiring after two minutes), and
``gwkey:<name>:leases``, a sorted set of the requests in flight scored by their expiry: an
admission drops the expired ones, counts the rest and adds its own if under ``max_concurrent``;
each process renews its leases together in one pipelined round trip (``leases``), and a pod that
dies stops renewing, so its slots come back within the lease's ttl.

Redis down: ``fail="open"`` lets requests through uncounted, ``"closed"`` refuses them
(``LimitUnavailable``, a 503); a warning at most every 10 s either way (``StoreTrouble``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from gateway.keys.counts import Admit, Failure, Refusal, Step, StoreTrouble
from gateway.keys.leases import LEASE_TTL, Held, Leases
from gateway.keys.policy import KeyPolicy

_ADMIT = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
local window = math.floor(t / 60)
local lease_key = KEYS[1] .. ':leases'
local req_key = KEYS[1] .. ':r:' .. window
local tok_key = KEYS[1] .. ':t:' .. window
local max_conc, rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ttl_ms, generating = tonumber(ARGV[4]), ARGV[5] == '1'
local takes_slot = generating and max_conc > 0
local c = 0
if takes_slot then
  redis.call('ZREMRANGEBYSCORE', lease_key, '-inf', t)
  c = redis.call('ZCARD', lease_key)
end
local r = tonumber(redis.call('GET', req_key) or '0')
local k = tonumber(redis.call('GET', tok_key) or '0')
local reset = tostring((window + 1) * 60 - t)
local refused = 0
if takes_slot and c >= max_conc then refused = 1
elseif rpm > 0 and r >= rpm then refused = 2
elseif generating and tpm > 0 and k >= tpm then refused = 3 end
if refused == 0 then
  if takes_slot then
    redis.call('ZADD', lease_key, string.format('%.6f', t + ttl_ms / 1000), ARGV[6])
    redis.call('PEXPIRE', lease_key, ttl_ms + 1000)
  end
  r = redis.call('INCR', req_key)
  redis.call('EXPIRE', req_key, 120)
end
return {refused, r, k, reset, takes_slot and refused == 0 and 1 or 0}
"""

_RENEW = """
local now = redis.call('TIME')
local expires = string.format('%.6f', tonumber(now[1]) + tonumber(now[2]) / 1000000 + tonumber(ARGV[1]) / 1000)
local renewed = 0
for i = 2, #ARGV do
  renewed = renewed + redis.call('ZADD', KEYS[1], 'XX', 'CH', expires, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) + 1000)
return renewed
"""

_CHARGE = """
local now = redis.call('TIME')
local window = math.floor(tonumber(now[1]) / 60)
local tok_key = KEYS[1] .. ':t:' .. window
redis.call('INCRBY', tok_key, ARGV[1])
redis.call('EXPIRE', tok_key, 120)
return 1
"""

_REFUSALS: tuple[Refusal | None, ...] = (None, "concurrency", "requests", "tokens")


class RedisLimits:
    """Every pod's counts in one Redis (module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        fail: Failure,
        timeout: float,
        prefix: str = "gwkey:",
        lease_ttl: float = LEASE_TTL,
        on_failure: Callable[[Step], None] | None = None,
    ) -> None:
        import redis.asyncio

        self._redis: Any = redis.asyncio.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self._prefix = prefix
        self._admit = self._redis.register_script(_ADMIT)
        self._charge = self._redis.register_script(_CHARGE)
        self._renew_script = self._redis.register_script(_RENEW)
        self._trouble = StoreTrouble("Redis", fail, on_failure)
        self._leases = Leases(lease_ttl, self._renew)
        self._ttl_ms = math.ceil(lease_ttl * 1000)
        self._tasks: set[asyncio.Task[None]] = set()

    def _key(self, policy: KeyPolicy) -> str:
        return self._prefix + str(policy.name)

    async def admit(self, policy: KeyPolicy, *, generating: bool = True) -> Admit:
        import redis

        assert policy.name is not None
        lease = self._leases.new_id()
        args: list[str | int] = [policy.max_concurrent, policy.rpm, policy.tpm, self._ttl_ms, int(generating), lease]
        try:
            refused, requests, tokens, reset, leased = await self._admit(keys=[self._key(policy)], args=args)
        except (redis.RedisError, OSError) as exc:
            return self._trouble.admit_failed(exc)
        held = lease if int(leased) else None
        if held is not None:
            self._leases.hold(policy.name, held)
        return Admit(_REFUSALS[int(refused)], int(requests), int(tokens), float(reset), lease=held)

    async def release(self, policy: KeyPolicy, admit: Admit) -> None:
        import redis

        if admit.lease is None:
            return
        assert policy.name is not None
        self._leases.drop(policy.name, admit.lease)
        try:
            await self._redis.zrem(self._key(policy) + ":leases", admit.lease)
        except (redis.RedisError, OSError) as exc:
            message = "key limits: could not release a slot of %s in Redis (%s); it expires by itself"
            self._trouble.report("release", message, policy.name, exc)

    async def _renew(self, held: Held) -> None:
        import redis

        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for name, leases in held.items():
                    key = f"{self._prefix}{name}:leases"
                    await self._renew_script(keys=[key], args=[self._ttl_ms, *leases], client=pipe)
                await pipe.execute()
        except (redis.RedisError, OSError) as exc:
            self._trouble.report("renew", "key limits: could not renew leases in Redis (%s)", exc)

    def charge(self, policy: KeyPolicy, tokens: int) -> None:
        task = asyncio.get_running_loop().create_task(self._send_charge(policy, tokens))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_charge(self, policy: KeyPolicy, tokens: int) -> None:
        import redis

        try:
            await self._charge(keys=[self._key(policy)], args=[tokens])
        except (redis.RedisError, OSError) as exc:
            self._trouble.report(
                "charge", "key limits: could not charge %d tokens to %s in Redis (%s)", tokens, policy.name, exc
            )

    async def close(self) -> None:
        import redis

        await self._leases.close()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=1.0)
        try:
            for name, leases in self._leases.held().items():
                await self._redis.zrem(f"{self._prefix}{name}:leases", *leases)
        except (redis.RedisError, OSError):
            pass  # they expire by themselves
        await self._redis.aclose()
