"""Admission control: a per-model limit on requests in flight, and a bounded, timed, scheduled queue.

A gateway that queues without bound turns overload into timeouts for everyone; this one answers
429 with ``Retry-After`` at once when a model's queue is full, when a sheddable request finds
every slot taken, when a request's deadline cannot be met from the queue ahead of it, or when a
request waited its ``queue_timeout`` out, so an upstream balancer can retry elsewhere. Who goes
next when a slot frees is ``core.schedule``'s order: priority bands, then fair share of tokens
between API keys (or arrival, ``fifo``).

Without preemption a request that finds every slot busy waits for one to free, however fair the
order: under a flood of long streams that is seconds. So a model has ``headroom``: slots above
its limit that only a request of a flow holding less than its weighted share of the slots, or of
a band more urgent than one running, may take. One flow alone never exceeds the limit; a quiet
team or a critical request under someone else's flood is admitted at once.

The counts here also feed the gauges the Kubernetes Gateway API Inference Extension reads
(``vllm:num_requests_waiting``, ``vllm:num_requests_running``, ``vllm:lora_requests_info``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gateway.core.schedule import Claim, FairQueue, SchedulingPolicy
from gateway.errors import BackendTimeoutError, QueueRefusedError

NO_CLAIM = Claim()


@dataclass(frozen=True, slots=True)
class SchedulingRules:
    """How every model's queue is ordered and when it refuses (``Settings``' scheduling fields)."""

    policy: SchedulingPolicy = "fair"
    headroom: float = 0.0
    """Slots above the limit, as a fraction of it (rounded up), for under-share flows and more
    urgent bands; ``fair`` only."""
    shed_priority: int | None = None
    """Bands at or above it are refused at once when no slot is free; None: none is."""
    shed_share: float = 1.0
    """The most of the slots (a fraction, rounded down, one at least) those bands may hold while a
    more urgent request runs; with nothing more urgent running they may take every free slot."""
    band_queue_sizes: Mapping[int, int] = field(default_factory=dict)
    """A cap on each listed band's waiters (the model's queue size caps them all)."""


HOLD_SMOOTHING = 0.2
"""Weight of the latest slot hold in the model's mean hold time (the deadline estimate's unit)."""


@dataclass
class ModelGate:
    """One model's slots (``limit``; 0 = unlimited) and wait queue (``queue_size``)."""

    limit: int
    queue_size: int
    rules: SchedulingRules = field(default_factory=SchedulingRules)
    running: int = 0
    running_adapters: Counter[str] = field(default_factory=Counter)
    waiting_adapters: Counter[str] = field(default_factory=Counter)
    running_flows: Counter[str] = field(default_factory=Counter)
    running_bands: Counter[int] = field(default_factory=Counter)
    mean_hold: float | None = None
    """Seconds a slot is held, smoothed; None until a request ended."""
    _queue: FairQueue = field(init=False)
    _headroom: int = field(init=False)
    _active: Counter[str] = field(default_factory=Counter)
    """Requests running or waiting, per flow: the flows that share the slots now."""
    _weights: dict[str, float] = field(default_factory=dict)
    _active_weight: float = 0.0

    def __post_init__(self) -> None:
        self._queue = FairQueue(self.rules.policy)
        fair = self.rules.policy == "fair" and self.limit > 0
        self._headroom = math.ceil(self.limit * self.rules.headroom) if fair else 0

    @property
    def waiting(self) -> int:
        return self._queue.live

    def _has_room(self) -> bool:
        return self.limit <= 0 or self.running < self.limit

    def _may_borrow(self, claim: Claim) -> bool:
        """Whether ``claim`` may take a headroom slot: one is free, and its flow holds less than
        its weighted share of the slots or its band is more urgent than a running request's."""
        if self.running >= self.limit + self._headroom:
            return False
        if self.running_bands and claim.band < max(self.running_bands):
            return True
        flow = claim.flow
        total = self._active_weight + (0.0 if self._active[flow] else claim.weight)
        return self.running_flows[flow] < self.limit * claim.weight / total

    def _shed_band(self, claim: Claim) -> bool:
        shed = self.rules.shed_priority
        return shed is not None and claim.band >= shed

    def _within_shed_share(self) -> bool:
        """Whether a request of a shed band may take a free slot: the model is idle to it (only
        shed bands run), or they hold less than their share. Work no client waits on (batch
        lines) then fills an idle model, but leaves most of a busy one to the requests that run
        on it, which every sequence it adds would slow."""
        shed = self.rules.shed_priority
        assert shed is not None
        held = sum(count for band, count in self.running_bands.items() if band >= shed)
        if held >= self.running or self.limit <= 0:
            return True
        return held < max(1, math.floor(self.limit * self.rules.shed_share))

    def admit_now(self, adapter: str | None, claim: Claim) -> float | None:
        """A slot at once when one is free to this claim (its expected cost), else None. A shed
        band's request takes only a free slot within its share, never a headroom one."""
        if self._shed_band(claim):
            if not (self._has_room() and not self._queue.live and self._within_shed_share()):
                return None
        elif not ((self._has_room() and not self._queue.live) or (self._headroom and self._may_borrow(claim))):
            return None
        self._join(claim)
        self._take(claim)
        self._taken(adapter)
        return self._queue.account(claim)

    async def acquire(self, adapter: str | None, claim: Claim, timeout: float, remaining: float | None) -> float:
        """Take a slot, waiting in line if needed; returns the request's expected cost (what
        ``release`` settles). Raises ``QueueRefusedError`` (429) when it is refused or waited
        too long, 504 when the request's own deadline (``remaining`` seconds away) passes first."""
        admitted = self.admit_now(adapter, claim)
        if admitted is not None:
            return admitted
        self._refuse_or_make_room(claim, remaining)
        wait = timeout if remaining is None else min(timeout, remaining)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = self._queue.push(claim, future)
        self._join(claim)
        if adapter:
            self.waiting_adapters[adapter] += 1
        granted = False
        try:
            try:
                await asyncio.wait_for(asyncio.shield(future), wait)
                granted = True
            except TimeoutError:
                if future.done() and not future.cancelled() and future.exception() is None:
                    granted = True
                    self._taken(adapter)
                    return waiter.cost
                future.cancel()
                if remaining is not None and remaining <= timeout:
                    raise BackendTimeoutError("the request's deadline passed while it waited for a slot") from None
                raise QueueRefusedError(
                    f"Waited {timeout:g} s for a free slot for this model; retry shortly.",
                    reason="timeout",
                    code="queue_timeout",
                ) from None
            except asyncio.CancelledError:
                if future.done() and not future.cancelled() and future.exception() is None:
                    granted = True
                    self._give_back(claim)  # granted, but the client left: pass the slot on
                else:
                    future.cancel()
                raise
            self._taken(adapter)
            return waiter.cost
        finally:
            if adapter:
                self.waiting_adapters[adapter] -= 1
                if self.waiting_adapters[adapter] <= 0:
                    del self.waiting_adapters[adapter]
            if not granted:
                self._queue.discard(waiter)
                self._part(claim)

    def _refuse_or_make_room(self, claim: Claim, remaining: float | None) -> None:
        """Every slot is taken: refuse now what queueing cannot serve, or give up a waiter of a
        flow that holds more than its share of a full queue."""
        rules = self.rules
        if self._shed_band(claim):
            raise QueueRefusedError(
                f"No slot of this model is free to requests of priority {claim.band} (every slot is busy, or "
                "their share is taken while more urgent requests run), and they are shed, not queued; retry shortly.",
                reason="sheddable",
                code="sheddable_saturated",
            )
        if remaining is not None and self.mean_hold is not None:
            slots = self.limit + self._headroom
            wait = (self._queue.ahead(claim) + 1) * self.mean_hold / max(slots, 1)
            if wait > remaining:
                raise QueueRefusedError(
                    f"The request's deadline ({remaining:.3g} s away) cannot be met: about {wait:.3g} s of "
                    "queue is ahead of it.",
                    reason="deadline",
                    code="deadline_unmeetable",
                    retry_after=wait,
                )
        band_cap = rules.band_queue_sizes.get(claim.band)
        if band_cap is not None and self._queue.waiting_in(claim.band) >= band_cap:
            self._displace(claim, same_band=True, what=f"priority {claim.band}'s queue")
        if self._queue.live >= self.queue_size:
            self._displace(claim, same_band=False, what="this model's queue")

    def _displace(self, claim: Claim, *, same_band: bool, what: str) -> None:
        victim = self._queue.victim(claim, same_band=same_band)
        if victim is None:
            raise QueueRefusedError(
                f"Too many requests are waiting in {what}; retry shortly.", reason="queue_full", code="queue_full"
            )
        future = victim.payload
        self._queue.discard(victim)
        future.set_exception(
            QueueRefusedError(
                f"The request gave its place in {what} to a request of a flow with fewer waiting; retry shortly.",
                reason="displaced",
                code="queue_full",
            )
        )

    def reject_waiting(self, error: Exception) -> int:
        """Fail every request still waiting for a slot (shutdown): they never reach Triton."""
        rejected = 0
        while (waiter := self._queue.pop()) is not None:
            future = waiter.payload
            if not future.done():
                future.set_exception(error)
                rejected += 1
        return rejected

    def _join(self, claim: Claim) -> None:
        flow = claim.flow
        if not self._active[flow]:
            self._weights[flow] = claim.weight
            self._active_weight += claim.weight
        self._active[flow] += 1

    def _part(self, claim: Claim) -> None:
        flow = claim.flow
        self._active[flow] -= 1
        if self._active[flow] <= 0:
            del self._active[flow]
            self._active_weight -= self._weights.pop(flow, claim.weight)
            if not self._active:
                self._active_weight = 0.0  # no float drift survives an idle moment

    def _take(self, claim: Claim) -> None:
        self.running += 1
        self.running_flows[claim.flow] += 1
        self.running_bands[claim.band] += 1

    def _taken(self, adapter: str | None) -> None:
        if adapter:
            self.running_adapters[adapter] += 1

    def _untake(self, claim: Claim) -> None:
        self.running -= 1
        flows, bands = self.running_flows, self.running_bands
        flows[claim.flow] -= 1
        if flows[claim.flow] <= 0:
            del flows[claim.flow]
        bands[claim.band] -= 1
        if bands[claim.band] <= 0:
            del bands[claim.band]

    def _give_back(self, claim: Claim) -> None:
        self._untake(claim)
        self._part(claim)
        self._wake()

    def release(
        self,
        adapter: str | None,
        claim: Claim = NO_CLAIM,
        cost: float = 0.0,
        held: float | None = None,
        used: tuple[int, int] | None = None,
    ) -> None:
        """A slot given back after ``held`` seconds; ``used``: the (prompt, completion) tokens the
        request spent, which replace its expected ``cost`` in its flow's share."""
        self._untake(claim)
        if adapter:
            self.running_adapters[adapter] -= 1
            if self.running_adapters[adapter] <= 0:
                del self.running_adapters[adapter]
        self._part(claim)
        if held is not None:
            mean = self.mean_hold
            self.mean_hold = held if mean is None else mean + (held - mean) * HOLD_SMOOTHING
        if used is not None:
            prompt, completion = used  # a backend that reports no prompt count: the planned one
            self._queue.settle(claim, cost, prompt or claim.prompt_tokens, completion)
        self._wake()

    def _wake(self) -> None:
        queue = self._queue
        while queue.live:
            if not self._has_room():
                head = queue.peek()
                if head is None or not (self._headroom and self._may_borrow(head.claim)):
                    return
            waiter = queue.pop()
            assert waiter is not None
            future = waiter.payload
            if not future.done():
                self._take(waiter.claim)  # handed over: the waiter owns it now
                future.set_result(None)


@dataclass
class Ticket:
    """A held slot; ``release`` is idempotent so every exit path may call it."""

    gate: ModelGate | None
    adapter: str | None
    claim: Claim = NO_CLAIM
    cost: float = 0.0
    since: float = field(default_factory=time.perf_counter)
    released: bool = False

    def release(self, used: tuple[int, int] | None = None) -> None:
        """Give the slot back; ``used``: the request's (prompt, completion) tokens, when known."""
        if not self.released and self.gate is not None:
            self.released = True
            self.gate.release(self.adapter, self.claim, self.cost, time.perf_counter() - self.since, used)


class Admission:
    """The gates of all models; ``limits(model)`` gives a model's (slots, queue size)."""

    def __init__(
        self, limits: Callable[[str], tuple[int, int]], queue_timeout: float, rules: SchedulingRules | None = None
    ) -> None:
        self.limits = limits
        self.queue_timeout = queue_timeout
        self.rules = rules or SchedulingRules()
        self.gates: dict[str, ModelGate] = {}

    def gate(self, model: str) -> ModelGate:
        gate = self.gates.get(model)
        if gate is None:
            gate = self.gates[model] = ModelGate(*self.limits(model), rules=self.rules)
        return gate

    def try_acquire(self, model: str, adapter: str | None, claim: Claim = NO_CLAIM) -> Ticket | None:
        """A slot now if one is free to this claim, else None (then ``acquire``)."""
        gate = self.gate(model)
        cost = gate.admit_now(adapter, claim)
        return None if cost is None else Ticket(gate, adapter, claim, cost)

    async def acquire(
        self, model: str, adapter: str | None, remaining: float | None = None, claim: Claim = NO_CLAIM
    ) -> Ticket:
        """A slot on ``model``; ``remaining``: seconds until the request's deadline (None: none)."""
        gate = self.gate(model)
        cost = await gate.acquire(adapter, claim, self.queue_timeout, remaining)
        return Ticket(gate, adapter, claim, cost)

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
