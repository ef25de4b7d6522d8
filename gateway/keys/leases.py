"""Concurrency as leases: a request in flight holds a lease with an expiry, not a share of a counter.

A counter only comes down when its holder says so, so a process killed with requests in flight
keeps their slots taken. A lease is counted only until it expires: the process that holds it
renews it while the request runs, and a process that dies stops renewing, so its slots come
back by themselves within ``ttl`` seconds of its last renewal, which is at most ``ttl`` after
it died.

One ``Leases`` per store and process renews all of its leases together, every ``ttl / 3``
seconds, in one call to the store (one Redis round trip, one SQLite transaction): a running
request costs nothing (no task of its own, nothing per token), and a renewal may miss twice
before a live request's lease lapses. A lease that lapsed anyway (the process was stopped, or
could not reach the store, for longer than ``ttl``) is not taken again: the request runs to its
end uncounted rather than push the key over its limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable

logger = logging.getLogger("gateway.keys")

LEASE_TTL = 30.0
"""Seconds a lease lives without renewal (``key_limits_lease_ttl``): the bound on how long a
dead process's slots stay taken."""

RENEWALS_PER_TTL = 3
"""Renewals within one ``ttl``: a live lease survives two missed ones."""

Held = dict[str, list[str]]
"""Key name → the ids of its leases this process holds."""


class Leases:
    """The leases one store of this process holds, and the one task that renews them."""

    def __init__(self, ttl: float, renew: Callable[[Held], Awaitable[None]]) -> None:
        self.ttl = ttl
        self.interval = ttl / RENEWALS_PER_TTL
        self._renew = renew
        self._held: dict[str, set[str]] = {}
        self._ids = itertools.count()
        self._prefix = secrets.token_hex(6)  # unique to this process and store, across hosts
        self._task: asyncio.Task[None] | None = None

    def new_id(self) -> str:
        """An id no other process or store uses."""
        return f"{self._prefix}:{next(self._ids)}"

    def hold(self, name: str, lease: str) -> None:
        """Renew ``lease`` from now on (the renewal task starts with the first lease)."""
        self._held.setdefault(name, set()).add(lease)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._renew_forever(), name="key-lease-renewal")

    def drop(self, name: str, lease: str) -> None:
        """Stop renewing ``lease`` (before it is removed from the store, so no renewal races it)."""
        held = self._held.get(name)
        if held is not None:
            held.discard(lease)
            if not held:
                del self._held[name]

    def held(self) -> Held:
        return {name: sorted(ids) for name, ids in self._held.items()}

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if self._held:
                try:
                    await self._renew(self.held())
                except Exception:  # the store reports its own failures; the loop must go on
                    logger.exception("key limits: renewing leases failed")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
