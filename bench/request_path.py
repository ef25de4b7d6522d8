"""The gateway's fixed per-request path, in one process: µs from the ASGI call to the first token.

The app is the real ``create_app`` (middlewares, routes, planning with tiny-llm's tokenizer and
chat template, admission, the generation, SSE) in front of an in-process backend that answers
every generation with one final token at once; the requests are ASGI calls made here, one after
the other, on uvloop, after ``server.tune_gc`` as the server does. What is left out: the socket,
uvicorn's HTTP parsing, the HTTP/2 call to Triton and Triton itself. So the figures are the part of
the added TTFT at concurrency 1 (``big_prompts.py``) that the gateway's own Python code, apart from
the HTTP/2 call, costs. They carry none of the noise of sockets and other processes, and the bench is
a target for cProfile (``--profile``).

Per scenario it prints the median µs of thread CPU time per request (``--clock wall`` for wall
time) of: the ASGI call until the backend is called
(``to backend``: middlewares, routing, body parsing and validation, planning, admission, the
generation's start), of which planning alone (``plan``, ``prepare_*`` called directly), then
until the first token's bytes are sent (``to 1st token``: TTFT in process), and the whole request
(``total``: the response's end, the generation's close and the outcome). Each figure is the best
median of ``--rounds`` rounds of ``--requests`` requests, the scenarios taking turns.
``--against <tree>`` runs this tree and another in alternating processes (``--alternations``
each) and prints the best of each as a before → after table. ``--cold <MB>`` writes a buffer
larger than the last-level cache before each request, as the running gateway finds its caches when
a request follows a long stream or a pause (the ``plan`` column stays warm: it is timed apart).

    .venv/bin/python bench/request_path.py
    .venv/bin/python bench/request_path.py --profile chat-stream-10k
    .venv/bin/python bench/request_path.py --against /tmp/base          (before/after)
    .venv/bin/python bench/request_path.py --gateway-root /tmp/base     (another tree alone)
    .venv/bin/python bench/request_path.py --cold 64                    (caches cold, as at c=1)
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]


def _gateway_root() -> Path:
    """``--gateway-root``, read before the gateway is imported: the tree whose package runs."""
    for i, arg in enumerate(sys.argv):
        if arg == "--gateway-root" and i + 1 < len(sys.argv):
            return Path(sys.argv[i + 1]).resolve()
        if arg.startswith("--gateway-root="):
            return Path(arg.partition("=")[2]).resolve()
    return ROOT


sys.path.insert(0, str(_gateway_root()))

from common import request_prompt  # noqa: E402

from gateway.app import create_app  # noqa: E402
from gateway.backend.types import BackendModel, GenerationChunk, GenerationRequest  # noqa: E402
from gateway.config import Settings  # noqa: E402
from gateway.plan.requests import ChatCompletionRequest, CompletionRequest  # noqa: E402
from gateway.plan.prepare import RequestContext, prepare_chat, prepare_completion  # noqa: E402
from gateway.server import tune_gc  # noqa: E402

clock = time.thread_time_ns
"""CPU time of this thread: the requests never wait for I/O, so it is their cost, without the
time the scheduler gave other processes on a shared machine (``--clock wall`` for wall time)."""

WEIGHTS = ROOT / "triton_models" / "weights" / "tiny-llm"
MODEL = "m"


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    body: dict[str, Any]


def scenarios() -> list[Scenario]:
    """What ``big_prompts.py``'s clients send (``loadgen.http_payload``), streamed and not."""
    small, large = request_prompt(100), request_prompt(10_000)
    out = []
    for stream in (True, False):
        suffix = "stream" if stream else "json"
        extra: dict[str, Any] = {"stream": stream, "max_tokens": 16}
        if stream:
            extra["stream_options"] = {"include_usage": True}
        out.append(Scenario(f"completions-{suffix}-100", "/v1/completions", {"model": MODEL, "prompt": small, **extra}))
        for label, text in (("100", small), ("10k", large)):
            body = {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}
            out.append(Scenario(f"chat-{suffix}-{label}", "/v1/chat/completions", body))
    return out


@dataclass
class OneTokenBackend:
    """Every generation: one final token, at once. Notes when the first call was made."""

    called_at: int = 0

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def server_ready(self) -> bool:
        return True

    async def list_models(self) -> list[BackendModel]:
        return [BackendModel(name=MODEL, platform="")]

    def abort_all(self, error: Exception) -> int:
        return 0

    async def generate(self, request: GenerationRequest) -> AsyncIterator[list[GenerationChunk]]:
        self.called_at = clock()
        yield [
            GenerationChunk(
                text=(b"tok",), finish_reason=("length",), num_input_tokens=3, num_output_tokens=(1,), final=True
            )
        ]


@dataclass
class Timings:
    backend: list[int] = field(default_factory=list)
    first: list[int] = field(default_factory=list)
    total: list[int] = field(default_factory=list)


async def one_request(app: Any, backend: OneTokenBackend, scenario: Scenario, raw: bytes, into: Timings) -> None:
    """One ASGI call as uvicorn makes it: the body in one message, then ``receive`` waits (the
    client stays connected). ``to 1st token`` is the first body message carrying bytes (the SSE
    role+token frame, or the JSON body)."""
    disconnected = asyncio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await disconnected.wait()
        return {"type": "http.disconnect"}

    first = 0
    status = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal first, status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif not first and message.get("body"):
            first = clock()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "method": "POST",
        "root_path": "",
        "path": scenario.path,
        "raw_path": scenario.path.encode(),
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"accept", b"text/event-stream"),
            (b"content-length", str(len(raw)).encode()),
        ],
        "state": {},
    }
    backend.called_at = 0
    if EVICT is not None:
        evict()
    start = clock()
    await app(scope, receive, send)
    end = clock()
    disconnected.set()
    if status != 200 or not first or not backend.called_at:
        raise RuntimeError(f"{scenario.name}: status {status}, first body {first}, backend called {backend.called_at}")
    into.backend.append(backend.called_at - start)
    into.first.append(first - start)
    into.total.append(end - start)


async def plan_only(app: Any, scenario: Scenario, n: int) -> list[int]:
    """``prepare_*`` alone, on the body the route would get."""
    components = app.state.components
    chat = scenario.path.endswith("chat/completions")
    out = []
    for _ in range(n):
        start = clock()
        if chat:
            await prepare_chat(
                ChatCompletionRequest.model_validate(scenario.body),
                RequestContext("r"),
                components.catalog,
                components.settings,
            )
        else:
            await prepare_completion(
                CompletionRequest.model_validate(scenario.body),
                RequestContext("r"),
                components.catalog,
                components.settings,
            )
        out.append(clock() - start)
    return out


EVICT: bytearray | None = None
"""``--cold``: a buffer larger than the last-level cache, written before each request."""


def evict() -> None:
    """Leave the caches as another process would: every line of ``EVICT`` written, so none of
    the gateway's code or data is left in them (the branch predictors are left as they are)."""
    assert EVICT is not None
    EVICT[::64] = bytes(len(EVICT) // 64)


def median_us(values: list[int]) -> float:
    return statistics.median(values) / 1000


async def run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    repo = Path(tempfile.mkdtemp(prefix="gw-request-path-"))
    version = repo / MODEL / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(json.dumps({"model": str(WEIGHTS), "max_model_len": 1_000_000}))
    backend = OneTokenBackend()
    app = create_app(Settings(model_repository=[repo], responses_store_enabled=False), backend=backend)  # type: ignore[arg-type]
    chosen = [s for s in scenarios() if not args.only or s.name in args.only.split(",")]
    results: dict[str, dict[str, float]] = {}
    log(f"gateway package: {Path(sys.modules['gateway'].__file__ or '').parent}")
    async with app.router.lifespan_context(app):
        tune_gc()
        for scenario in chosen:  # warm every path once (imports, caches, the template's compile)
            await one_request(app, backend, scenario, orjson.dumps(scenario.body), Timings())
        if args.profile:
            scenario = next(s for s in chosen if s.name == args.profile)
            await profile(app, backend, scenario, args)
            return results
        for _ in range(args.rounds):  # scenarios take turns, so a burst of load elsewhere hits all alike
            for scenario in chosen:
                raw = orjson.dumps(scenario.body)
                timings = Timings()
                for _ in range(args.requests):
                    await one_request(app, backend, scenario, raw, timings)
                figures = {
                    "to backend": median_us(timings.backend),
                    "plan": median_us(await plan_only(app, scenario, args.requests)),
                    "to 1st token": median_us(timings.first),
                    "total": median_us(timings.total),
                }
                best = results.setdefault(scenario.name, figures)
                for key, value in figures.items():
                    best[key] = min(best[key], value)
                gc.collect()
    for name, figures in results.items():
        log(f"{name:24s} " + "  ".join(f"{k} {v:7.1f}" for k, v in figures.items()))
    return results


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def compare(args: argparse.Namespace) -> None:
    """This tree and ``--against`` in turns, each run a process of its own; the best of each."""
    trees = {"before": args.against.resolve(), "after": _gateway_root()}
    best: dict[str, dict[str, dict[str, float]]] = {label: {} for label in trees}
    for turn in range(args.alternations):
        order = list(trees.items()) if turn % 2 == 0 else list(trees.items())[::-1]
        for label, root in order:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                command = [sys.executable, __file__, *_strip(sys.argv[1:]), "--gateway-root", str(root)]
                subprocess.run([*command, "--output", out.name], check=True)
                for name, figures in json.loads(Path(out.name).read_text()).items():
                    kept = best[label].setdefault(name, figures)
                    for key, value in figures.items():
                        kept[key] = min(kept[key], value)
    lines = [
        f"before: `{trees['before']}`, after: `{trees['after']}`; µs of CPU per request, best of "
        f"{args.alternations} processes each",
        "",
        "| scenario | to backend | plan | to 1st token | total |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in best["after"]:
        before, after = best["before"].get(name), best["after"][name]
        if before is None:
            continue
        cells = [f"{before[k]:.0f} → {after[k]:.0f}" for k in ("to backend", "plan", "to 1st token", "total")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    if args.output is not None:
        args.output.write_text(json.dumps(best, indent=2) + "\n")


def _strip(argv: list[str]) -> list[str]:
    """The command line without the options ``compare`` sets itself."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.partition("=")[0]
        if name in ("--against", "--alternations", "--gateway-root", "--output"):
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


async def profile(app: Any, backend: OneTokenBackend, scenario: Scenario, args: argparse.Namespace) -> None:
    raw = orjson.dumps(scenario.body)
    profiler = cProfile.Profile()
    timings = Timings()
    profiler.enable()
    for _ in range(args.requests):
        await one_request(app, backend, scenario, raw, timings)
    profiler.disable()
    stats = pstats.Stats(profiler).strip_dirs()
    stats.sort_stats(args.sort).print_stats(args.top)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=500, help="requests per round and scenario")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per scenario (the best median is kept)")
    parser.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    parser.add_argument("--profile", default="", help="cProfile --requests requests of this scenario")
    parser.add_argument("--sort", default="tottime", help="pstats sort key of --profile")
    parser.add_argument("--top", type=int, default=40, help="rows of --profile")
    parser.add_argument("--output", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument("--gateway-root", type=Path, default=None, help="run the gateway package of this tree")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="thread CPU time or wall time")
    parser.add_argument("--against", type=Path, default=None, help="compare with the gateway of this tree (before)")
    parser.add_argument(
        "--cold", type=int, default=0, metavar="MB", help="write this many MB before each request (caches cold)"
    )
    parser.add_argument("--alternations", type=int, default=3, help="processes per tree with --against")
    args = parser.parse_args()
    if args.against is not None:
        compare(args)
        return
    if args.cold:
        global EVICT
        EVICT = bytearray(args.cold << 20)
    if args.clock == "wall":
        global clock
        clock = time.perf_counter_ns
    try:
        import uvloop

        runner: Callable[[Awaitable[Any]], Any] = uvloop.run
    except ImportError:
        runner = asyncio.run
    results = runner(run(args))
    if args.output is not None and results:
        args.output.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
