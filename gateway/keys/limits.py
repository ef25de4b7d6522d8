"""Per-key limits: requests per minute, tokens per minute and requests in flight.

Windows are fixed minutes of the wall clock (``counts.WINDOW``): a key's requests and tokens
count in the minute they fall in, and both counts start again at the next minute. Every gateway
process and Redis agree on which minute it is without talking to each other, so the same counts
serve one process (``MemoryLimits``), the workers of one gateway (``FileLimits``: one SQLite
file) and many gateways (``RedisLimits``). The cost is the known one of fixed windows: a key may
spend its budget at the end of one minute and again at the start of the next.

Requests in flight are leases (``leases``) where several processes share the counts: a process
that dies holding requests stops renewing their leases, and their slots come back within the
lease's ttl. Tokens are charged as a request spends them, prompt and completion together (every
half second while it runs, and the rest when it ends): a stream that runs past the budget is not
cut off, and the key's next request is refused until the window turns. A counting request
(``generating=False``: ``/tokenize``, ``count_tokens``, ``input_tokens``) counts against ``rpm``
only: it takes no slot and spends no tokens.
"""

from __future__ import annotations

import itertools
import time

from gateway.keys.counts import (
    UNCOUNTED,
    WINDOW,
    Admit,
    LimitStore,
    LimitUnavailable,
    Refusal,
    decide,
    rate_headers,
    retry_after,
    window_of,
)
from gateway.keys.file_limits import FileLimits
from gateway.keys.policy import KeyPolicy
from gateway.keys.redis_limits import RedisLimits

__all__ = [
    "UNCOUNTED",
    "WINDOW",
    "Admit",
    "FileLimits",
    "LimitStore",
    "LimitUnavailable",
    "MemoryLimits",
    "RedisLimits",
    "Refusal",
    "decide",
    "rate_headers",
    "retry_after",
    "window_of",
]


class MemoryLimits:
    """One process's counts: its requests in flight die with it, so a slot needs no expiry."""

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}
        """name → [window, requests, tokens]."""
        self._held: dict[str, set[str]] = {}
        """name → the leases of its requests in flight."""
        self._ids = itertools.count()

    def _row(self, name: str, window: int) -> list[int]:
        row = self._counts.get(name)
        if row is None:
            row = self._counts[name] = [window, 0, 0]
        elif row[0] != window:
            row[0], row[1], row[2] = window, 0, 0
        return row

    async def admit(self, policy: KeyPolicy, *, generating: bool = True) -> Admit:
        assert policy.name is not None
        window, reset = window_of(time.time())
        row = self._row(policy.name, window)
        held = self._held.setdefault(policy.name, set())
        refused = decide(policy, len(held), row[1], row[2], generating=generating)
        if refused is not None:
            return Admit(refused, row[1], row[2], reset)
        row[1] += 1
        if not (generating and policy.max_concurrent):
            return Admit(None, row[1], row[2], reset)
        lease = str(next(self._ids))
        held.add(lease)
        return Admit(None, row[1], row[2], reset, lease=lease)

    async def release(self, policy: KeyPolicy, admit: Admit) -> None:
        assert policy.name is not None
        if admit.lease is not None:
            self._held.get(policy.name, set()).discard(admit.lease)

    def charge(self, policy: KeyPolicy, tokens: int) -> None:
        assert policy.name is not None
        window, _ = window_of(time.time())
        self._row(policy.name, window)[2] += tokens

    async def close(self) -> None:
        pass
