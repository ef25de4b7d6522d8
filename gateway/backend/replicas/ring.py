"""Consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, 2017).

A key's replicas, in preference order, are the distinct members met walking clockwise from the
key's point on a ring of virtual nodes. Why a ring rather than ``hash % n``: when a replica
leaves, only the keys it held move (to their next member), and when it returns exactly those
keys move back; every other conversation keeps its warm cache. Why bounded: a key takes the
first preferred replica whose load is under ``ceil(factor × (total + 1) / members)``, so one hot
session or one shared system prompt spills to its next replica instead of piling onto one
(below a floor the router sets, nothing spills). A load is whatever the caller scores members
by, in requests and not necessarily whole (the router's is the pool's ``replica_load``).

Every gateway process builds the same ring from the same member names (the hash is keyed by
nothing but the name), so workers and gateway replicas agree on where a key lives without
talking to each other.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

M = TypeVar("M")

VIRTUAL_NODES = 100
"""Points per member: enough that three members each own close to a third of the ring."""


def key_hash(key: str) -> int:
    """A stable 64-bit hash (Python's ``hash`` is salted per process, so it cannot be shared)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


class HashRing(Generic[M]):
    """The ring of a set of members, each named by ``name(member)``."""

    def __init__(self, members: Iterable[M], name: Callable[[M], str]) -> None:
        points: list[tuple[int, int]] = []
        self._members: list[M] = list(members)
        for index, member in enumerate(self._members):
            label = name(member)
            points.extend((key_hash(f"{label}#{v}"), index) for v in range(VIRTUAL_NODES))
        points.sort()
        self._points = [p for p, _ in points]
        self._owners = [i for _, i in points]

    def __len__(self) -> int:
        return len(self._members)

    def preference(self, key: str) -> Iterator[M]:
        """Every member once, in the order the key prefers them."""
        if not self._members:
            return
        start = bisect.bisect_left(self._points, key_hash(key))
        seen: set[int] = set()
        total = len(self._points)
        for offset in range(total):
            owner = self._owners[(start + offset) % total]
            if owner not in seen:
                seen.add(owner)
                yield self._members[owner]
                if len(seen) == len(self._members):
                    return


def load_bound(members: Sequence[M], load: Callable[[M], float], factor: float, floor: int) -> int:
    """The load (in requests) at which a member is too busy to take a keyed request: ``factor``
    times the mean counting the request being placed, and at least ``floor``."""
    total = sum(load(m) for m in members)
    return max(floor, math.ceil(factor * (total + 1) / len(members)))


def bounded_choice(
    preference: Iterable[M], eligible: Sequence[M], load: Callable[[M], float], factor: float, floor: int
) -> tuple[M, bool]:
    """The first preferred member among ``eligible`` (not empty) whose load is under the bound,
    and whether it is the key's home (its first eligible member). An eligible member missing from
    the ring (it joined since the ring was built) is taken only when no ring member is under the
    bound (``load_bound``)."""
    allowed = set(map(id, eligible))
    bound = load_bound(eligible, load, factor, floor)
    home = True
    for member in preference:
        if id(member) not in allowed:
            continue
        if load(member) < bound:
            return member, home
        home = False
    return min(eligible, key=load), False
