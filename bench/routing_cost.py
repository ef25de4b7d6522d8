"""What replica routing costs the gateway's CPU: per batch (what the pool adds to every backend
batch after the first: one call that hands out the replica's stream's own step) and per request
(the router's choice), in one process.

Per batch: a backend that yields ready batches is drained directly and through a ``ReplicaPool``
of one; the difference is what every token batch pays for the pool. Per request: the router's
``choose`` for each policy over 3 replicas, by prompt size (the prefix route hashes up to
``routing_prefix_chars`` of the prompt in 256-character blocks and looks them up per replica).

    .venv/bin/python bench/routing_cost.py
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.backend.replicas.endpoints import parse_endpoints
from gateway.backend.replicas.pool import ReplicaPool
from gateway.backend.replicas.router import Policy, Router
from gateway.backend.types import BackendModel, GenerationChunk, GenerationRequest, Placement
from gateway.config import Settings

BATCHES = 200_000


class _ReadyBatches:
    """A backend whose batches are ready at once: only the layers above it cost anything."""

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def server_ready(self) -> bool:
        return True

    async def list_models(self) -> list[BackendModel]:
        return [BackendModel("m")]

    def abort_all(self, error: Exception) -> int:
        return 0

    def generate(self, request: GenerationRequest) -> _Batches:
        return _Batches()


class _Batches:
    """``BATCHES`` ready batches, as a ``GenerationStream``."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self._left = BATCHES
        self._batch = [GenerationChunk((b"tok ",), (None,))]

    def __aiter__(self) -> _Batches:
        return self

    async def __anext__(self) -> list[GenerationChunk]:
        if not self._left:
            raise StopAsyncIteration
        self._left -= 1
        return self._batch

    async def aclose(self) -> None:
        pass


async def per_batch() -> tuple[float, float]:
    backend = _ReadyBatches()
    pool = ReplicaPool(parse_endpoints("a:1"), lambda address: backend, Router(Policy.AFFINITY, 16384, 1.25))
    await pool._discover()
    request = GenerationRequest("r", "m", "prompt", {}, placement=Placement())
    best = {"direct": float("inf"), "pool": float("inf")}
    for _ in range(5):
        for label, source in (("direct", backend.generate), ("pool", pool.generate)):
            started = time.perf_counter()
            async with contextlib.aclosing(source(request)) as stream:
                async for _batch in stream:
                    pass
            best[label] = min(best[label], (time.perf_counter() - started) / BATCHES * 1e6)
    return best["direct"], best["pool"]


@dataclass
class _Replica:
    address: str
    in_flight: int = 0


def per_request(policy: Policy, prompt: str, *, keyed: bool = True, rounds: int = 2000) -> float:
    settings = Settings()
    router = Router(policy, settings.routing_prefix_chars, settings.routing_load_factor)
    replicas = [_Replica(f"10.0.0.{i}:8001") for i in range(3)]
    router.set_members(replicas)
    best = float("inf")
    for repeat in range(5):
        started = time.perf_counter()
        for number in range(rounds):
            # A new conversation each time, so the prefix tables grow as in real traffic.
            router.choose(f"session-{repeat}-{number}" if keyed else None, f"{repeat}-{number} {prompt}", replicas)
        best = min(best, (time.perf_counter() - started) / rounds * 1e6)
    return best


def main() -> None:
    direct, pooled = asyncio.run(per_batch())
    print(f"per batch: direct {direct:.3f} µs, through the pool {pooled:.3f} µs (+{pooled - direct:.3f} µs)")
    print("per request, router.choose over 3 replicas (µs):")
    print(f"{'policy':<14}" + "".join(f"{size:>10}" for size in ("100 B", "10 KB", "100 KB")))
    for policy in Policy:
        row = [per_request(policy, "x" * size) for size in (100, 10_000, 100_000)]
        print(f"{policy.value:<14}" + "".join(f"{value:>10.2f}" for value in row))
    row = [per_request(Policy.AFFINITY, "x" * size, keyed=False) for size in (100, 10_000, 100_000)]
    print(f"{'affinity, no key':<14}" + "".join(f"{value:>10.2f}" for value in row))


if __name__ == "__main__":
    main()
