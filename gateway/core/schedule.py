"""Who goes next when a model's slots are full: priority bands, and fair share between flows.

Pure data structures (no asyncio, no clock): ``core.admission`` owns the slots and the waiting
futures and asks this module only in what order the waiters go.

- **Bands** are vLLM's ``priority``: an integer, lower runs first. A waiter of a more urgent band
  always goes before any of a less urgent one (strict priority, as vLLM's priority scheduling and
  the Inference Extension's bands).
- **Inside a band**, ``fair`` picks by start-time fair queueing (SFQ, Goyal et al. 1996) over
  flows (one per API key name): each request's start tag is the later of the band's virtual time
  and its flow's last finish tag, its finish tag its start plus its cost over its flow's weight,
  and the smallest start tag goes next. The cost is tokens (prompt + expected completion), so a
  flow of long generations is charged for what it takes; each request's real cost replaces the
  expected one when it ends (``settle``). A flow that was idle starts at the virtual time: it
  neither banks credit while away nor waits behind a busy flow's backlog. ``fifo`` tags by
  arrival instead.

Every admission is accounted, the ones that found a free slot at once too (``account``): fair
share is over what ran, not only over what queued.
"""

from __future__ import annotations

import heapq
import math
from bisect import insort
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.priorities import STANDARD

SchedulingPolicy = Literal["fair", "fifo"]

NO_KEY_FLOW = "-"
"""The one flow every request without a named API key shares."""


@dataclass(frozen=True, slots=True)
class Claim:
    """What scheduling knows of one request: its band, its flow and weight, its expected size.
    Planning makes it (from the body, the header and the key's policy); the core only reads it."""

    band: int = STANDARD
    flow: str = NO_KEY_FLOW
    weight: float = 1.0
    prompt_tokens: int = 0
    """The prompt's tokens over all choices (counted or estimated)."""
    max_tokens: int = 0
    """The most the request may generate over all choices."""


@dataclass(slots=True, eq=False)
class Waiter:
    """One queued request: its claim, its tags, and what admission hangs on it (a future)."""

    claim: Claim
    cost: float
    """Expected tokens, charged to its flow at its tag."""
    start: float
    seq: int
    payload: Any = None
    live: bool = True


@dataclass(slots=True)
class _Band:
    heap: list[tuple[float, int, Waiter]] = field(default_factory=list)
    vtime: float = 0.0
    finish: dict[str, float] = field(default_factory=dict)
    """Each flow's last finish tag (kept while the gateway runs: one float per key name)."""
    queued: dict[str, deque[Waiter]] = field(default_factory=dict)
    """Each flow's live waiters, oldest first."""
    live: int = 0


class FairQueue:
    """The waiters of one model, in bands, each band ordered by ``policy``."""

    __slots__ = ("policy", "_bands", "_order", "_seq", "_mean_completion", "live")

    def __init__(self, policy: SchedulingPolicy = "fair") -> None:
        self.policy = policy
        self._bands: dict[int, _Band] = {}
        self._order: list[int] = []
        """The bands seen, most urgent first."""
        self._seq = 0
        self._mean_completion: dict[str, float] = {}
        """Each flow's running mean of completion tokens per request: the expected completion
        of its next request, when under its ``max_tokens``."""
        self.live = 0
        """Waiters queued, over every band."""

    def _band(self, band: int) -> _Band:
        found = self._bands.get(band)
        if found is None:
            found = self._bands[band] = _Band()
            insort(self._order, band)
        return found

    def expected_cost(self, claim: Claim) -> float:
        """Prompt tokens plus the completion expected: ``max_tokens``, or the flow's mean
        completion so far when that is smaller (so a client that always sends a large
        ``max_tokens`` is not charged for tokens it never takes)."""
        mean = self._mean_completion.get(claim.flow)
        completion = claim.max_tokens if mean is None else min(claim.max_tokens, mean)
        return float(claim.prompt_tokens + completion) or 1.0

    def _tag(self, band: _Band, claim: Claim, cost: float) -> float:
        self._seq += 1
        if self.policy == "fifo":
            return float(self._seq)
        start = max(band.vtime, band.finish.get(claim.flow, 0.0))
        mine = band.queued.get(claim.flow)
        if mine:
            start = max(start, mine[-1].start)  # a flow's own requests keep their order
        band.finish[claim.flow] = start + cost / claim.weight
        return start

    def account(self, claim: Claim) -> float:
        """A request admitted without waiting: its cost is charged to its flow all the same.
        Returns the expected cost (what ``settle`` corrects)."""
        band = self._band(claim.band)
        cost = self.expected_cost(claim)
        start = self._tag(band, claim, cost)
        if self.policy == "fair":
            band.vtime = max(band.vtime, start)
        return cost

    def push(self, claim: Claim, payload: Any = None) -> Waiter:
        band = self._band(claim.band)
        cost = self.expected_cost(claim)
        waiter = Waiter(claim, cost, self._tag(band, claim, cost), self._seq, payload)
        heapq.heappush(band.heap, (waiter.start, waiter.seq, waiter))
        band.queued.setdefault(claim.flow, deque()).append(waiter)
        band.live += 1
        self.live += 1
        return waiter

    def peek(self) -> Waiter | None:
        """The waiter that goes next, left queued."""
        for number in self._order:
            band = self._bands[number]
            if band.live:
                heap = band.heap
                while not heap[0][2].live:
                    heapq.heappop(heap)
                return heap[0][2]
        return None

    def pop(self) -> Waiter | None:
        """The next waiter, taken off the queue."""
        waiter = self.peek()
        if waiter is None:
            return None
        band = self._bands[waiter.claim.band]
        heapq.heappop(band.heap)
        if self.policy == "fair":
            band.vtime = max(band.vtime, waiter.start)
        self._forget(band, waiter)
        return waiter

    def discard(self, waiter: Waiter) -> None:
        """A waiter that left (timed out, cancelled, displaced): skipped when its turn comes.
        Its cost stays charged only if it ran; a request that never ran gives its tag back when
        it was its flow's last."""
        if not waiter.live:
            return
        band = self._bands[waiter.claim.band]
        self._forget(band, waiter)
        flow = waiter.claim.flow
        if self.policy == "fair" and not band.queued.get(flow):
            band.finish[flow] = max(band.vtime, band.finish.get(flow, 0.0) - waiter.cost / waiter.claim.weight)

    def _forget(self, band: _Band, waiter: Waiter) -> None:
        waiter.live = False
        band.live -= 1
        self.live -= 1
        mine = band.queued[waiter.claim.flow]
        if mine[0] is waiter:
            mine.popleft()
        else:
            mine.remove(waiter)
        if not mine:
            del band.queued[waiter.claim.flow]

    def settle(self, claim: Claim, expected: float, prompt_tokens: int, completion_tokens: int) -> None:
        """A request ended having spent these tokens: its flow is charged the difference from
        what its tag assumed, and its flow's mean completion learns from it."""
        flow = claim.flow
        mean = self._mean_completion.get(flow)
        self._mean_completion[flow] = (
            float(completion_tokens) if mean is None else mean + (completion_tokens - mean) * 0.2
        )
        if self.policy != "fair":
            return
        band = self._band(claim.band)
        delta = (prompt_tokens + completion_tokens - expected) / claim.weight
        finish = band.finish.get(flow, band.vtime) + delta
        mine = band.queued.get(flow)
        if mine:
            finish = max(finish, mine[-1].start)
        band.finish[flow] = finish

    def waiting_in(self, band: int) -> int:
        found = self._bands.get(band)
        return 0 if found is None else found.live

    def ahead(self, claim: Claim) -> int:
        """About how many waiters would go before a new request of ``claim``: all of the more
        urgent bands', and in its own band every one (``fifo``) or, with fair share, each other
        flow's up to its weighted share of the turns before this flow's next one."""
        count = 0
        for number in self._order:
            if number > claim.band:
                break
            band = self._bands[number]
            if number < claim.band or self.policy == "fifo":
                count += band.live
                continue
            mine = band.queued.get(claim.flow)
            turns = (len(mine) if mine else 0) + 1
            count += turns - 1
            for flow, queued in band.queued.items():
                if flow != claim.flow:
                    share = math.ceil(turns * queued[0].claim.weight / claim.weight)
                    count += min(len(queued), share)
        return count

    def victim(self, claim: Claim, *, same_band: bool) -> Waiter | None:
        """Whom a full queue gives up for a new request of ``claim``: the newest waiter of the
        flow with the most waiters per weight, in the least urgent band that is not more urgent
        than ``claim``'s (only its own band when ``same_band``). In its own band only a flow
        holding more per weight than ``claim``'s would with it; None: the new request is the
        one refused."""
        for number in reversed(self._order):
            if number < claim.band:
                return None
            if same_band and number != claim.band:
                continue
            band = self._bands[number]
            if not band.live:
                continue
            flow, queued = max(band.queued.items(), key=lambda item: len(item[1]) / item[1][0].claim.weight)
            if number > claim.band:
                return queued[-1]
            mine = band.queued.get(claim.flow)
            if (
                flow != claim.flow
                and len(queued) / queued[0].claim.weight > ((len(mine) if mine else 0) + 1) / claim.weight
            ):
                return queued[-1]
            return None
        return None
