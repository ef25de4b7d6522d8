"""Several Triton replicas behind one ``Backend``: discovery, ejection, routing and the retry.

Each replica is a ``TritonBackend`` of its own (its own connections, in-flight count and model
list). The pool is what the rest of the gateway sees: ``list_models`` is the union of the
replicas' catalogs, ``server_ready`` is true while any replica is, and ``generate`` places each
request with the ``Router`` among the replicas that are in rotation and serve its model, by their
load: the gateway's in-flight count weighed with what each engine reports on its Triton's metrics
endpoint, read every ``load_interval`` (``engine_load.py``).

Failure handling, and why:
- A call that fails because the replica cannot be reached (gRPC UNAVAILABLE from the transport:
  refused connection, lost connection, GOAWAY) or a probe that finds it not ready ejects the
  replica: it leaves the rotation for a backoff (1 s, doubling per consecutive failure up to
  30 s, so a replica that flaps sits out longer each time), then probes (``ServerReady`` and its
  model list, every ``DOWN_PROBE_INTERVAL`` while it stays down) decide when it returns. Requests
  pay for a dead replica at most once, instead of each one waiting for its own connect error.
- A request that failed before its first token is tried once more on another replica. One that
  fails after it, with the replica to blame, moves: another replica continues it from what it
  generated, up to ``migration_limit`` times (``stream.py``; the contract builds the request).
- When no replica is in rotation, requests still go to the replicas that serve the model
  ("panic mode"): refusing everything while Triton may be back already would turn a blip into an
  outage, and with one replica this is exactly the single-endpoint behaviour.
- A replica that leaves DNS (a pod going away: Kubernetes removes a terminating pod from a
  headless Service first) leaves the rotation at once; its streams finish, then it is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.backend.replicas.endpoints import resolve
from gateway.backend.replicas.engine_load import EngineLoad, EngineLoadReader, replica_load, total_load
from gateway.backend.replicas.router import Choice, Route, Router
from gateway.backend.replicas.stream import PoolStream
from gateway.backend.types import (
    Backend,
    BackendModel,
    Embedding,
    EmbeddingRequest,
    GenerationRequest,
)
from gateway.config import EndpointSpec
from gateway.errors import BackendUnavailableError, BackendUnreachableError, GatewayError

logger = logging.getLogger(__name__)

EJECT_BASE = 1.0
EJECT_MAX = 30.0
PROBE_TIMEOUT = 2.0
STALE_READS = 3
"""Intervals without an answer from a replica's metrics after which its load is not trusted."""
TICK = 0.25
"""Seconds between the pool's housekeeping rounds (due probes, due DNS lookups)."""
HEALTH_INTERVAL = 5.0
"""Seconds between readiness probes of a replica in rotation."""
DOWN_PROBE_INTERVAL = 2.0
"""Seconds between probes of an ejected replica once its backoff has passed: a pod restarted in a
rolling upgrade takes work again this soon after it is ready (with the backoff's doubling, it
sat out up to 30 s more, while the next pod was being drained)."""


def metrics_url(address: str, port: int | None) -> str | None:
    """The metrics endpoint of the Triton at ``address`` (its gRPC ``host:port``)."""
    if port is None:
        return None
    host = address.rsplit(":", 1)[0]
    return f"http://{host}:{port}/metrics"


def _backoff(failures: int) -> float:
    return min(EJECT_MAX, EJECT_BASE * 2.0 ** (failures - 1)) * random.uniform(0.8, 1.2)


class RoutingObserver(Protocol):
    """What the pool reports (``gateway.metrics`` implements it; the pool knows nothing of it)."""

    def routed(self, replica: str, route: str, home: bool | None) -> None: ...

    def retried(self, replica: str) -> None: ...

    def ejected(self, replica: str) -> None: ...

    def replica_up(self, replica: str, up: bool) -> None: ...

    def replica_left(self, replica: str) -> None:
        """The replica left DNS: it is no longer one of the pool's, up or down."""
        ...

    def replica_in_flight(self, replica: str, delta: int) -> None: ...

    def engine_load(self, replica: str, loads: Mapping[str, EngineLoad] | None) -> None:
        """After each read of a replica's metrics; None: it did not answer."""
        ...

    def migrated(self, replica: str, outcome: str, seconds: float | None) -> None:
        """A stream whose replica failed mid-stream: ``continued`` elsewhere (``seconds`` from the
        failure to the continuation's first tokens), ``failed`` (no replica could take it) or
        ``not_continuable`` (its contract cannot continue it, or it moved ``migration_limit`` times)."""
        ...


@dataclass(eq=False)
class Replica:
    """One Triton server and what the pool knows of it."""

    address: str
    backend: Backend
    in_flight: int = 0
    up: bool = True
    models: frozenset[str] | None = None
    """Ready models there at the last listing; None before the first one (assumed to serve all)."""
    failures: int = 0
    """Ejections and failed probes in a row: an ejection's backoff doubles with each. A replica
    must stay in rotation for ``EJECT_MAX`` before it is forgiven, so one that flaps (up for a
    moment, down again) sits out longer each time instead of pulling traffic in and dropping it."""
    up_since: float = 0.0
    next_probe: float = 0.0
    """``time.monotonic()`` of the next readiness probe."""
    retired: bool = False
    """Gone from DNS: out of rotation for good, closed once its streams end."""
    metrics_url: str | None = None
    """Its Triton's metrics endpoint (``triton_metrics``); None: its load is not read."""
    engine: EngineLoad | None = None
    """The engine's load at the last read that answered (all models), None before one."""
    engine_read_at: float = 0.0
    """``time.monotonic()`` of that read."""
    in_flight_at_read: int = 0
    """``in_flight`` when ``engine`` was read: what this gateway placed since then is not in it."""
    next_read: float = 0.0
    stale_after: float = float("inf")
    """Seconds after a read past which its load is no longer trusted."""

    def serves(self, model: str) -> bool:
        return self.models is None or model in self.models

    @property
    def load(self) -> float:
        """The router's score: in-flight requests weighed with the engine's own load, the engine's
        running count moved by what this gateway placed or finished there since the read (a
        burst placed within one interval would otherwise all go to the replica the read called
        idle)."""
        engine = self.engine
        since = self.in_flight - self.in_flight_at_read
        if engine is not None and since:
            engine = EngineLoad(max(0.0, engine.running + since), engine.waiting, engine.kv_usage)
        return replica_load(self.in_flight, engine, self.trusted)

    @property
    def trusted(self) -> bool:
        """Whether its load is believed: its metrics answered within ``STALE_READS`` intervals,
        or they are not read, or have never answered (no port there, or a wrong one: its own
        count is all there is, as for every replica then, and scoring them all down would only
        tighten the load bound). One whose metrics stopped answering is scored down, not
        believed idle."""
        return (
            self.engine is None
            or self.metrics_url is None
            or time.monotonic() - self.engine_read_at <= self.stale_after
        )


class ReplicaPool:
    """A ``Backend`` over several Triton replicas."""

    def __init__(
        self,
        specs: Sequence[EndpointSpec],
        make_backend: Callable[[str], Backend],
        router: Router,
        *,
        resolve_interval: float = 5.0,
        observer: RoutingObserver | None = None,
        migration_limit: int = 0,
        load_interval: float = 1.0,
    ) -> None:
        self._specs = tuple(specs)
        self._make_backend = make_backend
        self.router = router
        self._resolve_interval = resolve_interval
        self.observer = observer
        self._replicas: dict[str, Replica] = {}
        self._resolved: dict[EndpointSpec, list[str]] = {}
        """Each entry's addresses at its last successful lookup."""
        self._next_resolve = 0.0
        self._housekeeping: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.migration_limit = migration_limit
        """Moves per stream to another replica after its own failed mid-stream (0: none)."""
        self.several = False
        """More than one replica is known (not retired): a stream could move. Set with the
        router's members, so a request reads it instead of counting the replicas."""
        self._load_interval = load_interval
        self._loads = EngineLoadReader(timeout=min(2.0, load_interval * 2))

    @property
    def replicas(self) -> list[Replica]:
        return list(self._replicas.values())

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self._discover()
        self._housekeeping = asyncio.create_task(self._housekeep_forever())

    async def close(self) -> None:
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeping
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*(r.backend.close() for r in self._replicas.values()), return_exceptions=True)
        self._replicas.clear()
        await self._loads.aclose()

    def abort_all(self, error: Exception) -> int:
        return sum(r.backend.abort_all(error) for r in self._replicas.values())

    # -- discovery and health ----------------------------------------------------------------

    async def _discover(self) -> None:
        """Resolve every entry; add new replicas, retire the ones DNS no longer lists."""
        self._next_resolve = time.monotonic() + self._resolve_interval
        found: list[str] = []
        metrics: dict[str, str | None] = {}
        for spec in self._specs:
            addresses = await resolve(spec)
            if addresses is None:
                logger.warning(
                    "DNS lookup of %s failed; keeping its %d known replicas",
                    spec.host,
                    len(self._resolved.get(spec, ())),
                )
                addresses = self._resolved.get(spec, [])
            self._resolved[spec] = addresses
            for address in addresses:
                if address not in found:
                    found.append(address)
                    metrics[address] = metrics_url(address, spec.metrics_port)
        changed = False
        for address in found:
            if address not in self._replicas:
                replica = Replica(
                    address,
                    self._make_backend(address),
                    metrics_url=metrics[address],
                    stale_after=STALE_READS * self._load_interval,
                )
                await replica.backend.start()
                self._replicas[address] = replica
                changed = True
                if self.observer is not None:
                    self.observer.replica_up(address, True)
                logger.info("Triton replica %s joined", address)
        for address, replica in list(self._replicas.items()):
            if address not in found and not replica.retired:
                replica.up, replica.retired = False, True
                changed = True
                if self.observer is not None:
                    self.observer.replica_left(address)
                    self.observer.engine_load(address, None)
                logger.info("Triton replica %s left DNS; closed once its %d streams end", address, replica.in_flight)
        if changed:
            members = [r for r in self._replicas.values() if not r.retired]
            self.router.set_members(members)
            self.several = len(members) > 1
        await self._close_retired()

    async def _close_retired(self) -> None:
        for address, replica in list(self._replicas.items()):
            if replica.retired and replica.in_flight == 0:
                del self._replicas[address]
                await replica.backend.close()

    async def _housekeep_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            try:
                if any(s.resolve for s in self._specs) and time.monotonic() >= self._next_resolve:
                    await self._discover()
                else:
                    await self._close_retired()
                now = time.monotonic()
                for replica in self._replicas.values():
                    if replica.retired:
                        continue
                    if now >= replica.next_probe:
                        replica.next_probe = now + HEALTH_INTERVAL  # not twice while one runs
                        self._spawn(self._probe(replica))
                    if replica.metrics_url is not None and now >= replica.next_read:
                        replica.next_read = now + self._load_interval
                        self._spawn(self._read_load(replica, replica.metrics_url))
            except Exception:  # a bug here must not stop health checking for good
                logger.exception("replica housekeeping failed")

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _read_load(self, replica: Replica, url: str) -> None:
        """The engine's load from its Triton's metrics (``engine_load.py``)."""
        loads = await self._loads.read(url)
        if loads is not None:
            replica.engine = total_load(loads)
            replica.engine_read_at = time.monotonic()
            replica.in_flight_at_read = replica.in_flight
        if self.observer is not None:
            self.observer.engine_load(replica.address, loads)

    async def _probe(self, replica: Replica) -> None:
        """Readiness and the model list: back in rotation when both answer, ejected when not."""
        try:
            ready = await asyncio.wait_for(replica.backend.server_ready(), PROBE_TIMEOUT)
            models = await asyncio.wait_for(replica.backend.list_models(), PROBE_TIMEOUT * 2) if ready else None
        except (TimeoutError, GatewayError):
            ready, models = False, None
        if replica.retired:
            return
        if not ready or models is None:
            if replica.up:
                self._eject(replica, "not ready" if not ready else "cannot list its models")
            else:  # still down: looked at again soon, so a restarted replica is back within seconds
                replica.failures += 1
                replica.next_probe = time.monotonic() + min(DOWN_PROBE_INTERVAL, _backoff(replica.failures))
            return
        replica.models = frozenset(m.name for m in models)
        if not replica.up:
            replica.up = True
            replica.up_since = time.monotonic()
            logger.info("Triton replica %s is back in rotation", replica.address)
            if self.observer is not None:
                self.observer.replica_up(replica.address, True)
        replica.next_probe = time.monotonic() + HEALTH_INTERVAL

    def _eject(self, replica: Replica, why: str) -> None:
        """Out of rotation until a probe after the backoff finds it ready. Jittered, so replicas
        ejected together (a network blip) are not all probed, and flooded, in the same instant."""
        if not replica.up:  # requests that were already running there fail too: once is enough
            return
        replica.up = False
        if time.monotonic() - replica.up_since >= EJECT_MAX:
            replica.failures = 0
        replica.failures += 1
        backoff = _backoff(replica.failures)
        replica.next_probe = time.monotonic() + backoff
        logger.warning("Triton replica %s ejected for %.1f s: %s", replica.address, backoff, why)
        if self.observer is not None:
            self.observer.ejected(replica.address)
            self.observer.replica_up(replica.address, False)

    # -- the Backend protocol ----------------------------------------------------------------

    async def server_ready(self) -> bool:
        """Whether any replica is ready now (each is asked; the ones not ready are ejected)."""
        live = [r for r in self._replicas.values() if not r.retired]
        answers = await asyncio.gather(*(self._ready(r) for r in live))
        return any(answers)

    async def _ready(self, replica: Replica) -> bool:
        try:
            ready = await asyncio.wait_for(replica.backend.server_ready(), PROBE_TIMEOUT)
        except TimeoutError:
            ready = False
        if not ready:
            self._eject(replica, "not ready")
        return ready

    async def list_models(self) -> list[BackendModel]:
        """The union of the replicas' ready models (the first replica listing a name describes
        it: replicas of one deployment load the same configuration). Raises only when no replica
        answers."""
        live = [r for r in self._replicas.values() if not r.retired]
        if not live:
            raise BackendUnavailableError("no Triton replica is known (DNS lists none)", headers={"Retry-After": "1"})
        answers = await asyncio.gather(*(r.backend.list_models() for r in live), return_exceptions=True)
        union: dict[str, BackendModel] = {}
        first_error: BaseException | None = None
        for replica, answer in zip(live, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, GatewayError):
                    raise answer
                first_error = first_error or answer
                if isinstance(answer, BackendUnavailableError):
                    self._eject(replica, answer.message)
                continue
            replica.models = frozenset(m.name for m in answer)
            for model in answer:
                union.setdefault(model.name, model)
        if first_error is not None and len(union) == 0 and all(isinstance(a, BaseException) for a in answers):
            raise first_error
        return list(union.values())

    def _eligible(self, model: str, tried: set[Replica]) -> list[Replica]:
        serving = [r for r in self._replicas.values() if not r.retired and r not in tried and r.serves(model)]
        up = [r for r in serving if r.up]
        return up or serving  # panic mode: none in rotation, try the ones that may be back

    def generate(self, request: GenerationRequest) -> PoolStream:
        return PoolStream(self, request)

    async def embed(self, request: EmbeddingRequest) -> Embedding:
        """One input on the least loaded replica serving the model (no prompt prefix or session
        to follow: an embedding leaves no cache worth returning to), and once more on another
        when the first is unavailable, as a generation before its first token."""
        tried: set[Replica] = set()
        while True:
            choice = self.router.choose(None, "", self._eligible(request.model, tried))
            if choice is None:
                raise BackendUnavailableError(
                    f"no Triton replica serves the model '{request.model}' now", headers={"Retry-After": "1"}
                )
            replica = choice.replica
            assert isinstance(replica, Replica)
            replica.in_flight += 1
            if self.observer is not None:
                self.observer.routed(replica.address, choice.route.value, choice.home)
                self.observer.replica_in_flight(replica.address, 1)
            error: BaseException | None = None
            try:
                return await replica.backend.embed(request)
            except BackendUnavailableError as exc:
                error = exc
                tried.add(replica)
                if len(tried) > 1 or not self._eligible(request.model, tried):
                    raise
                logger.info("retrying an embedding elsewhere: %s failed (%s)", replica.address, exc.message)
                if self.observer is not None:
                    self.observer.retried(replica.address)
            finally:
                replica.in_flight -= 1
                if self.observer is not None:
                    self.observer.replica_in_flight(replica.address, -1)
                self._failed(replica, request.model, error)

    def _failed(self, replica: Replica, model: str, error: BaseException | None) -> None:
        """What a generation's failure says of its replica: unreachable (ejected), or not serving
        the model now (left out for it until the next listing)."""
        if isinstance(error, BackendUnreachableError):
            self._eject(replica, error.message)
        elif isinstance(error, BackendUnavailableError) and replica.models is not None:
            replica.models = replica.models - {model}

    def _placed(self, request: GenerationRequest, choice: Choice) -> Replica:
        replica = choice.replica
        assert isinstance(replica, Replica)
        placement = request.placement
        if placement is not None:
            placement.replica = replica.address
            placement.route = choice.route.value
        if self.observer is not None:
            self.observer.routed(replica.address, choice.route.value, choice.home)
        return replica


__all__ = ["ReplicaPool", "PoolStream", "Replica", "RoutingObserver", "Route"]
