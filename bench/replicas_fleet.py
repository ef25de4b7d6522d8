"""What every phase of ``replicas`` runs on: three tritonservers, one gateway over them, a client
that sees each stream's replica and gaps, and the Prometheus pages it reads.

The Tritons start together, in threads (each takes seconds to load its Python stub and model), so
they get no parent-death signal from the launcher: ``Fleet`` stops them in its ``__exit__``,
whatever ends the phase (``exit_on_signals`` turns SIGTERM and SIGHUP into an unwind). A replica
struck by the chaos phase starts again on its own three ports, as a restarted pod keeps its
address, so the gateway's pool finds it where it was.
"""

from __future__ import annotations

import random
import re
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.loadgen import HttpConnection, OnTokens, Record
from bench.stack import TEST_REPOSITORY, Gateway, Variant, log, start_gateway

DRAIN_GRACE = 15.0
"""Seconds a drained replica gets to exit before SIGKILL (the launcher's own default)."""
RESTART_TRIES = 5
"""Starts of a struck replica on its own ports before the phase gives up on it: a port of a
killed Triton can stay taken for a moment after its process group is gone."""


def in_parallel(function: Callable[[Any], None], items: Sequence[Any]) -> None:
    """``function(item)`` for every item at once; the first failure raised once all have ended."""
    errors: list[BaseException] = []

    def call(item: Any) -> None:
        try:
            function(item)
        except BaseException as exc:  # noqa: BLE001 - raised below, once every call ended
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def model_copy(directory: Path, model: str, parameters: dict[str, str]) -> Path:
    """A repository holding a copy of the test model ``model``, its ``parameters`` set as given
    (its code symlinked): a benchmark's cache size and prefill cost, not the committed ones."""
    source = TEST_REPOSITORY / model
    config = (source / "config.pbtxt").read_text()
    for key, value in parameters.items():
        pattern = rf'(key: "{key}"\s*value: \{{ string_value: ")[^"]*(")'
        config, count = re.subn(pattern, rf"\g<1>{value}\g<2>", config)
        if count != 1:
            raise RuntimeError(f"{source / 'config.pbtxt'} has no parameter {key}")
    (directory / model / "1").mkdir(parents=True)
    (directory / model / "config.pbtxt").write_text(config)
    for item in (source / "1").iterdir():
        if item.suffix in (".py", ".json"):
            (directory / model / "1" / item.name).symlink_to(item)
    return directory


@dataclass
class Fleet:
    """``count`` tritonservers serving one model; a context manager that stops them all."""

    name: str
    repository: Path
    model: str
    workdir: Path
    count: int = 3
    env: dict[int, dict[str, str]] = field(default_factory=dict)
    """Extra environment of some replicas, by index (the slow one's step delay)."""
    servers: list[Any] = field(default_factory=list)
    down: set[int] = field(default_factory=set)
    """Replicas struck and not yet started again."""
    starts: int = 0
    closed: bool = False
    """Set by ``stop``: a restart still under way then stops what it started."""

    def server(self, index: int, ports: tuple[int, int, int] = (0, 0, 0)) -> Any:
        from gateway.triton_launcher import TritonServer

        self.starts += 1
        return TritonServer(
            self.repository,
            log_file=self.workdir / f"triton-{self.name}-{index}-{self.starts}.log",
            grpc_port=ports[0],
            http_port=ports[1],
            metrics_port=ports[2],
            extra_args=("--model-control-mode=explicit", f"--load-model={self.model}"),
            extra_env=self.env.get(index, {}),
        )

    def __enter__(self) -> Fleet:
        log(f"{self.name}: starting {self.count} tritonservers with {self.model} (logs in {self.workdir})")
        self.servers = [self.server(index) for index in range(self.count)]
        try:
            in_parallel(lambda server: server.start(), self.servers)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        self.closed = True
        in_parallel(lambda server: server.stop(), self.servers)

    @property
    def urls(self) -> list[str]:
        return [server.grpc_url for server in self.servers]

    @property
    def metrics_urls(self) -> list[str]:
        return [server.metrics_url for server in self.servers]

    def live(self) -> list[int]:
        return [i for i, server in enumerate(self.servers) if i not in self.down and server.running]

    def strike(self, index: int, how: str) -> None:
        """``kill``: SIGKILL, no grace (then the launcher's cleanup of its shared memory);
        ``drain``: SIGTERM: Triton refuses new requests, gives its running ones its exit timeout
        (5 s), and is killed ``DRAIN_GRACE`` s after the signal if it has not exited by then
        (Triton 2.51 can abort while it exits and then sit in its signal handler)."""
        self.down.add(index)
        server = self.servers[index]
        if how == "kill":
            server.kill()
        server.stop(grace=DRAIN_GRACE)

    def restart(self, index: int) -> None:
        """The struck replica again, on its own ports."""
        old = self.servers[index]
        ports = (old.grpc_port, old.http_port, old.metrics_port)
        for attempt in range(RESTART_TRIES):
            if self.closed:
                return
            server = self.server(index, ports)
            try:
                server.start()
            except RuntimeError:
                if attempt + 1 == RESTART_TRIES:
                    raise
                time.sleep(1.0)
                continue
            self.servers[index] = server
            self.down.discard(index)
            if self.closed:
                server.stop()
            return


def settings_field(variant: Variant, name: str) -> bool:
    """Whether the variant's tree has the setting ``name`` (a tree from before it rejects the flag)."""
    config = variant.root / "gateway" / "config.py"
    return config.is_file() and re.search(rf"^    {re.escape(name)}: ", config.read_text(), re.MULTILINE) is not None


def start_pool_gateway(
    variant: Variant, fleet: Fleet, log_file: Path, own_args: Sequence[str], extra_args: Sequence[str]
) -> Gateway:
    """The variant's gateway over every replica of the fleet, reading each one's metrics port where
    its tree can (``--triton-metrics``); the phase's own flags after ``extra_args``, so they win."""
    args = [*extra_args, *own_args]
    if settings_field(variant, "triton_metrics"):
        args.append("--triton-metrics=" + ",".join(str(server.metrics_port) for server in fleet.servers))
    return start_gateway(variant, ",".join(fleet.urls), log_file, tuple(args))


def clean(workdir: Path) -> None:
    shutil.rmtree(workdir / "repository", ignore_errors=True)


# --------------------------------------------------------------------------- the client

VOCABULARY = (
    "replica cache prefix token stream model latency batch prompt answer question gateway server request "
    "session block memory engine kernel tensor schedule route policy warm cold hit miss drain failover"
).split()


def words(rng: random.Random, chars: int) -> str:
    """``chars`` characters of words drawn from ``rng``: prose a tokenizer splits as a real prompt."""
    drawn: list[str] = []
    length = 0
    while length < chars:
        drawn.append(rng.choice(VOCABULARY))
        length += len(drawn[-1]) + 1
    return " ".join(drawn)[:chars]


def chat_prompt(index: int, chars: int = 200) -> str:
    """The ``index``-th distinct prompt, the same in every run (a replay asks the same question)."""
    return f"Question {index}: " + words(random.Random(index), chars)


@dataclass
class StreamRecord(Record):
    """One streamed request: which replica answered it, when its tokens came, what it said."""

    index: int = 0
    replica: str | None = None
    route: str | None = None
    first: float | None = None
    max_gap: float = 0.0
    failure: str | None = None
    """How the request failed outside its stream: ``HTTP status`` (no stream: the gateway refused
    it) or ``transport`` (the connection broke or could not open); None: it did not, or an SSE
    error event said so (``error`` is set then)."""

    @property
    def text(self) -> str:
        return "".join(self.content or ())


class ReplicaConnection(HttpConnection):
    """The load generator's connection, also keeping the gateway's replica and route headers."""

    def on_header(self, name: bytes, value: bytes) -> None:
        if isinstance(self.record, StreamRecord):
            lowered = name.lower()
            if lowered == b"x-gateway-replica":
                self.record.replica = value.decode()
            elif lowered == b"x-gateway-route":
                self.record.route = value.decode()


def on_tokens(record: Record, now: float, count: float) -> None:
    """Each read that brought text: the stream's first token and its largest gap."""
    if isinstance(record, StreamRecord):
        if record.first is None:
            record.first = now
        elif record.last is not None:
            record.max_gap = max(record.max_gap, now - record.last)
    record.last = now


def chat_request(port: int, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    extra = "".join(f"{key}: {value}\r\n" for key, value in (headers or {}).items())
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Client:
    """One user's keep-alive connection to the gateway, opened again after it breaks."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connection: ReplicaConnection | None = None

    async def stream(self, record: StreamRecord, payload: bytes, callback: OnTokens = on_tokens) -> StreamRecord:
        """Send ``payload``; the record says how it went (a broken connection is its error)."""
        if record.content is None:
            record.content = []
        record.sent = time.perf_counter()
        try:
            if self.connection is None or self.connection.closed:
                self.connection = await ReplicaConnection.open("127.0.0.1", self.port)  # type: ignore[assignment]
            assert self.connection is not None
            await self.connection.request(payload, record, callback, True, 1)
        except Exception as exc:  # noqa: BLE001 - counted by the phase, and the user goes on
            if record.error is None:
                record.error = f"{type(exc).__name__}: {exc}"[:300]
            record.failure = "HTTP status" if str(exc).startswith("HTTP ") else "transport"
            self.close()
        return record

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


# --------------------------------------------------------------------------- Prometheus pages

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of the series ``name`` on a Prometheus text page: (labels, value)."""
    found = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is not None and match.group(1) == name:
            found.append((dict(_LABEL.findall(match.group(2) or "")), float(match.group(3))))
    return found


def total(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(value for have, value in samples(text, name) if all(have.get(k) == v for k, v in labels.items()))


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram summed over its other labels: cumulative counts by upper bound."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    @classmethod
    def read(cls, text: str, name: str) -> Histogram:
        bounds: dict[float, float] = {}
        for labels, value in samples(text, name + "_bucket"):
            bound = float(labels.get("le", "+Inf"))
            bounds[bound] = bounds.get(bound, 0.0) + value
        return cls(tuple(sorted(bounds.items())), total(text, name + "_sum"), total(text, name + "_count"))

    def since(self, before: Histogram) -> Histogram:
        """What was observed between two reads of one process's histogram."""
        earlier = dict(before.buckets)
        buckets = tuple((bound, count - earlier.get(bound, 0.0)) for bound, count in self.buckets)
        return Histogram(buckets, self.sum - before.sum, self.count - before.count)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """Prometheus' ``histogram_quantile``: linear within the bucket the rank falls in; the
        largest finite bound when it falls in ``+Inf``'s."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if bound == float("inf"):
                    return lower
                inside = cumulative - below
                return bound if inside <= 0 else lower + (bound - lower) * (rank - below) / inside
            lower, below = bound, cumulative
        return lower
