"""Which replica serves a request: the routing policies.

``affinity`` (the default) tries, in order: the request's session key (its conversation), the
prefix of its prompt, then the least busy replica. A session key keeps every turn of a
conversation where its KV cache is; the prefix sends prompts that open alike (a shared system
prompt, a growing agent transcript) where that prefix was last computed; with neither, load
decides. Only a prompt at least ``prefix_chars`` long has a prefix worth following: shorter ones
cost little to prefill anywhere, and hashing them whole would only pin identical prompts
together, so load places them. Keyed choices go through consistent hashing with bounded load
(``ring.py``). ``prefix``
skips the session key, ``least_loaded`` and ``round_robin`` ignore both: they are there to
compare against, and for backends without a prefix cache.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from gateway.backend.replicas.ring import HashRing, bounded_choice


class Policy(str, Enum):
    AFFINITY = "affinity"
    PREFIX = "prefix"
    LEAST_LOADED = "least_loaded"
    ROUND_ROBIN = "round_robin"


class Route(str, Enum):
    """How a request's replica was chosen (the ``x-gateway-route`` header)."""

    SESSION = "session"
    PREFIX = "prefix"
    LEAST_LOADED = "least_loaded"
    ROUND_ROBIN = "round_robin"


class Candidate(Protocol):
    address: str
    in_flight: int


@dataclass(frozen=True, slots=True)
class Choice:
    replica: Candidate
    route: Route
    home: bool | None
    """For a keyed route: whether the key's home replica took it (False: load or an ejection
    moved it). None for unkeyed routes."""


def _load(candidate: Candidate) -> int:
    return candidate.in_flight


class Router:
    """Picks among candidates the pool says are eligible; keeps only the ring and a counter."""

    def __init__(self, policy: Policy, prefix_chars: int, load_factor: float) -> None:
        self.policy = policy
        self._prefix_chars = prefix_chars
        self._load_factor = load_factor
        self._ring: HashRing[Candidate] = HashRing((), lambda c: c.address)
        self._turn = itertools.count()

    def set_members(self, members: Sequence[Candidate]) -> None:
        """Every known replica, up or not: an ejected one keeps its place on the ring, so its
        keys come back to it when it returns."""
        self._ring = HashRing(members, lambda c: c.address)

    def choose(self, session_key: str | None, prompt: str, eligible: Sequence[Candidate]) -> Choice | None:
        if not eligible:
            return None
        policy = self.policy
        if policy is Policy.AFFINITY and session_key:
            return self._keyed("s\0" + session_key, Route.SESSION, eligible)
        if policy in (Policy.AFFINITY, Policy.PREFIX) and len(prompt) >= self._prefix_chars:
            return self._keyed("p\0" + prompt[: self._prefix_chars], Route.PREFIX, eligible)
        if policy is Policy.ROUND_ROBIN:
            return Choice(eligible[next(self._turn) % len(eligible)], Route.ROUND_ROBIN, None)
        return Choice(self._least_loaded(eligible), Route.LEAST_LOADED, None)

    def _keyed(self, key: str, route: Route, eligible: Sequence[Candidate]) -> Choice:
        replica, home = bounded_choice(self._ring.preference(key), eligible, _load, self._load_factor)
        return Choice(replica, route, home)

    def _least_loaded(self, eligible: Sequence[Candidate]) -> Candidate:
        # Ties rotate, so equal replicas share the work instead of the first taking all of it.
        start = next(self._turn) % len(eligible)
        rotated = [*eligible[start:], *eligible[:start]]
        return min(rotated, key=_load)
