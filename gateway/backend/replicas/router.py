"""Which replica serves a request: the routing policies.

``affinity`` (the default) tries, in order: the request's session key (its conversation), the
prefix of its prompt, then the least busy replica. A session key keeps every turn of a
conversation where its KV cache is, by consistent hashing with bounded load (``ring.py``): every
gateway process and worker agrees on it without sharing anything. The prefix route sends a
prompt where the longest run of its leading blocks was sent before (``prefixes.py``): a turn
where its previous turn ran, a question behind a shared system prompt where that prompt is warm;
a prompt nothing matches (or shorter than one block) goes to the least busy replica, and is
remembered there. ``prefix`` skips the session key; ``least_loaded`` and ``round_robin`` ignore
both: they are there to compare against, and for backends without a prefix cache.

Both keyed routes respect the same load bound: a replica at or over it is passed over for the
next best (``bounded_choice``).

Every load decision (the bound, the least busy replica, the order among equal prefix matches)
reads a candidate's ``load``: its score in requests, which the pool computes from its own
in-flight count and the replica's engine metrics (``engine_load.replica_load``). The router
knows nothing of where the number comes from.

With one replica known there is nothing to choose between, and the prefix route is skipped: its
prompts are neither hashed nor remembered (hashing 16 K characters took ~15 µs of every
request's path to Triton, ~5 % of it), and they are placed as ``least_loaded``. Once a second
replica is known, prompts are remembered from then on.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gateway.backend.replicas.prefixes import BLOCK_CHARS, PrefixTable, block_hashes
from gateway.backend.replicas.ring import HashRing, bounded_choice, load_bound


class Policy(StrEnum):
    AFFINITY = "affinity"
    PREFIX = "prefix"
    LEAST_LOADED = "least_loaded"
    ROUND_ROBIN = "round_robin"


class Route(StrEnum):
    """How a request's replica was chosen (the ``x-gateway-route`` header)."""

    SESSION = "session"
    PREFIX = "prefix"
    LEAST_LOADED = "least_loaded"
    ROUND_ROBIN = "round_robin"


class Candidate(Protocol):
    @property
    def address(self) -> str: ...

    @property
    def load(self) -> float:
        """How busy it is, in requests (lower takes the next one)."""
        ...


@dataclass(frozen=True, slots=True)
class Choice:
    replica: Candidate
    route: Route
    home: bool | None
    """For a keyed route: whether the key's home replica (the session's ring position, the
    prompt's best prefix match) took it (False: load or an ejection moved it). None otherwise."""


SESSION_MIN_BOUND = 8
"""A replica whose load is under this many requests is never too busy for a session's next turn. A
conversation sends one request at a time, and moving it loses its whole cache, while an
inference server batches many requests at once: spilling at such a light load would trade a sure
hit for nothing (the bound alone, ceil(1.25 x 2 / 3) = 1, would move a session's turn whenever
another request is running on its replica)."""

PREFIX_MIN_BOUND = 4
"""The same floor for the prefix route, lower: a shared prefix (a system prompt) draws many
requests at once, so it must spread sooner, and a spill loses only what is shared, which the
next replica caches after one request."""


def _load(candidate: Candidate) -> float:
    return candidate.load


class Router:
    """Picks among candidates the pool says are eligible; keeps the ring, each replica's prefix
    table and a counter."""

    def __init__(self, policy: Policy, prefix_chars: int, load_factor: float) -> None:
        self.policy = policy
        self._prefix_chars = prefix_chars
        self._load_factor = load_factor
        self._ring: HashRing[Candidate] = HashRing((), lambda c: c.address)
        self._tables: dict[str, PrefixTable] = {}
        self._lone = False
        """One replica known: no prefix to match."""
        self._turn = itertools.count()

    def set_members(self, members: Sequence[Candidate]) -> None:
        """Every known replica, up or not: an ejected one keeps its place on the ring, so its
        keys come back to it when it returns."""
        self._ring = HashRing(members, lambda c: c.address)
        addresses = {m.address for m in members}
        self._tables = {a: self._tables.get(a) or PrefixTable() for a in addresses}
        self._lone = len(addresses) == 1

    def choose(self, session_key: str | None, prompt: str, eligible: Sequence[Candidate]) -> Choice | None:
        if not eligible:
            return None
        policy = self.policy
        if policy is Policy.AFFINITY and session_key:
            return self._keyed("s\0" + session_key, Route.SESSION, eligible)
        if policy in (Policy.AFFINITY, Policy.PREFIX) and len(prompt) >= BLOCK_CHARS and not self._lone:
            return self._by_prefix(block_hashes(prompt[: self._prefix_chars]), eligible)
        if policy is Policy.ROUND_ROBIN:
            return Choice(eligible[next(self._turn) % len(eligible)], Route.ROUND_ROBIN, None)
        return Choice(self._least_loaded(eligible), Route.LEAST_LOADED, None)

    def _keyed(self, key: str, route: Route, eligible: Sequence[Candidate]) -> Choice:
        preference = self._ring.preference(key)
        replica, home = bounded_choice(preference, eligible, _load, self._load_factor, SESSION_MIN_BOUND)
        return Choice(replica, route, home)

    def _by_prefix(self, hashes: list[int], eligible: Sequence[Candidate]) -> Choice:
        tables = self._tables
        scored = [(tables[c.address].matched(hashes) if c.address in tables else 0, c) for c in eligible]
        best = max(score for score, _ in scored)
        if best == 0:
            choice = Choice(self._least_loaded(eligible), Route.LEAST_LOADED, None)
        else:
            bound = load_bound(eligible, _load, self._load_factor, PREFIX_MIN_BOUND)
            # Longest match first, the less busy first among equal matches (a system prompt warm
            # everywhere: load decides).
            ranked = sorted(scored, key=lambda pair: (-pair[0], pair[1].load))
            score, replica = next(((s, c) for s, c in ranked if c.load < bound), (0, self._least_loaded(eligible)))
            choice = Choice(replica, Route.PREFIX, score == best)
        table = tables.get(choice.replica.address)
        if table is not None:
            table.add(hashes)
        return choice

    def _least_loaded(self, eligible: Sequence[Candidate]) -> Candidate:
        # Ties rotate, so equal replicas share the work instead of the first taking all of it.
        start = next(self._turn) % len(eligible)
        rotated = [*eligible[start:], *eligible[:start]]
        return min(rotated, key=_load)
