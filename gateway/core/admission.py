"""Admission control: a per-model limit on requests in flight and a bounded, timed wait queue.

A gateway that queues without bound turns overload into timeouts for everyone; this one answers
429 with ``Retry-After`` at once when a model's queue is full, or when a request waited its
``queue_timeout`` out, so an upstream balancer can retry elsewhere. The counts here also feed the
gauges the Kubernetes Gateway API Inference Extension reads (``vllm:num_requests_waiting``,
``vllm:num_requests_running``, ``vllm:lora_requests_info``).
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.errors import BackendTimeoutError, RateLimitError


@dataclass
class ModelGate:
    """One model's slots (``limit``; 0 = unlimited) and FIFO wait queue (``queue_size``)."""

    limit: int
    queue_size: int
    running: int = 0
    running_adapters: Counter[str] = field(default_factory=Counter)
    waiting_adapters: Counter[str] = field(default_factory=Counter)
    _waiters: deque[asyncio.Future[None]] = field(default_factory=deque)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _has_room(self) -> bool:
        return self.limit <= 0 or self.running < self.limit

    async def acquire(self, adapter: str | None, timeout: float, remaining: float | None) -> None:
        """Take a slot, waiting in line if needed. Raises 429 when the line is full or the wait
        times out, 504 when the request's own deadline (``remaining`` seconds away) passes first."""
        if self._has_room() and not self._waiters:
            self._take(adapter)
            return
        if len(self._waiters) >= self.queue_size:
            raise RateLimitError(
                "Too many requests are waiting for this model; retry shortly.", headers={"Retry-After": "1"}
            )
        wait = timeout if remaining is None else min(timeout, remaining)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        if adapter:
            self.waiting_adapters[adapter] += 1
        try:
            try:
                await asyncio.wait_for(asyncio.shield(future), wait)
            except TimeoutError:
                if future.done() and not future.cancelled():
                    self._taken(adapter)
                    return
                future.cancel()
                if remaining is not None and remaining <= timeout:
                    raise BackendTimeoutError("the request's deadline passed while it waited for a slot") from None
                raise RateLimitError(
                    f"Waited {timeout:g} s for a free slot for this model; retry shortly.",
                    headers={"Retry-After": "1"},
                ) from None
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self.running -= 1  # granted, but the client left: pass the slot on
                    self._wake()
                else:
                    future.cancel()
                raise
            self._taken(adapter)
        finally:
            if adapter:
                self.waiting_adapters[adapter] -= 1
                if self.waiting_adapters[adapter] <= 0:
                    del self.waiting_adapters[adapter]
            try:
                self._waiters.remove(future)
            except ValueError:
                pass

    def reject_waiting(self, error: Exception) -> int:
        """Fail every request still waiting for a slot (shutdown): they never reach Triton."""
        rejected = 0
        for future in list(self._waiters):
            if not future.done():
                future.set_exception(error)
                rejected += 1
        return rejected

    def _take(self, adapter: str | None) -> None:
        self.running += 1
        self._taken(adapter)

    def _taken(self, adapter: str | None) -> None:
        if adapter:
            self.running_adapters[adapter] += 1

    def release(self, adapter: str | None) -> None:
        self.running -= 1
        if adapter:
            self.running_adapters[adapter] -= 1
            if self.running_adapters[adapter] <= 0:
                del self.running_adapters[adapter]
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._has_room():
            future = self._waiters.popleft()
            if not future.done():
                self.running += 1  # handed over: the waiter owns it now
                future.set_result(None)


@dataclass
class Ticket:
    """A held slot; ``release`` is idempotent so every exit path may call it."""

    gate: ModelGate | None
    adapter: str | None
    released: bool = False

    def release(self) -> None:
        if not self.released and self.gate is not None:
            self.released = True
            self.gate.release(self.adapter)


class Admission:
    """The gates of all models; ``limits(model)`` gives a model's (slots, queue size)."""

    def __init__(self, limits: Callable[[str], tuple[int, int]], queue_timeout: float) -> None:
        self.limits = limits
        self.queue_timeout = queue_timeout
        self.gates: dict[str, ModelGate] = {}

    def gate(self, model: str) -> ModelGate:
        gate = self.gates.get(model)
        if gate is None:
            gate = self.gates[model] = ModelGate(*self.limits(model))
        return gate

    def try_acquire(self, model: str, adapter: str | None) -> Ticket | None:
        """A slot now if one is free and nobody is waiting, else None (then ``acquire``)."""
        gate = self.gate(model)
        if gate._has_room() and not gate.waiting:
            gate._take(adapter)
            return Ticket(gate, adapter)
        return None

    async def acquire(self, model: str, adapter: str | None, remaining: float | None = None) -> Ticket:
        """A slot on ``model``; ``remaining``: seconds until the request's deadline (None: none)."""
        gate = self.gate(model)
        await gate.acquire(adapter, self.queue_timeout, remaining)
        return Ticket(gate, adapter)

    def reject_waiting(self, error: Exception) -> int:
        return sum(gate.reject_waiting(error) for gate in self.gates.values())

    @property
    def in_flight(self) -> int:
        return sum(g.running for g in self.gates.values())


def worker_share(limit: int, workers: int, index: int, *, zero_is_unlimited: bool) -> int:
    """Worker ``index``'s share of a limit configured for the whole gateway (``workers`` processes).

    Each worker gets ``limit // workers``, and the first ``limit % workers`` workers one more, so
    the shares add up to exactly the configured limit. A slot limit (``zero_is_unlimited``: 0
    means no limit) stays 0, and a positive one never rounds down to 0, which would mean no limit
    or a worker that serves nothing: with fewer slots than workers each worker gets 1, and the
    gateway as a whole admits up to ``workers`` requests at once. A queue size may round to 0:
    that worker answers 429 at once when its slots are taken, as a ``max_queue_size`` of 0 does.
    """
    if workers <= 1 or limit <= 0:
        return limit
    share = limit // workers + (1 if index < limit % workers else 0)
    return max(share, 1) if zero_is_unlimited else share
