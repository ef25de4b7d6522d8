"""Shared pieces of the benchmarks: start Triton and the gateway, run a load client, machine facts,
and the idle-stream memory probe."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from loadgen import proc_cpu_seconds, proc_rss_bytes  # noqa: E402

REFERENCE_REPOSITORY = ROOT / "triton_models" / "reference"
TEST_REPOSITORY = ROOT / "tests" / "triton_models"
FIREHOSE_TOKEN = "tok "  # tests/triton_models/firehose/1/model.py: TOKEN = b"tok "
RELAY_PROGRAM = (sys.executable, str(BENCH / "relay_floor.py"))
"""The bare relay as ``start_gateway``'s ``program``: it takes the gateway's command line."""
PROSE_WORDS = "the quick brown fox jumps over a lazy dog while seven bright stars keep watching".split()


def exit_on_sigterm() -> None:
    """SIGTERM runs ``finally`` blocks (so Triton and the gateway are stopped), like Ctrl-C."""

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def run_and_report(
    args: Any, run: Callable[[Any], dict[str, Any]], print_table: Callable[[dict[str, Any]], None]
) -> int:
    """A bench's ``main`` after its arguments: run it (Triton and the gateway stopped on SIGTERM
    too), time it, write ``args.output`` as JSON and print the table."""
    exit_on_sigterm()
    started = time.time()
    result = run(args)
    result["seconds"] = round(time.time() - started, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1, default=str))
    print_table(result)
    print(f"JSON: {args.output}")
    return 0


def fmt(value: Any, digits: int = 1) -> str:
    """A table cell: ``–`` for nothing, thousands separated, else ``digits`` decimals."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}f}"
    return str(value)


def words_text(size: int, next_word: Callable[[], str]) -> str:
    """``size`` characters of words and spaces, each word from ``next_word``: prose that a
    tokenizer splits as it splits a real prompt (the benches' prompts, each with its own words)."""
    words: list[str] = []
    length = 0
    while length < size:
        word = next_word()
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def request_prompt(size: int) -> str:
    """About ``size`` bytes of ``PROSE_WORDS`` in a fixed order: prose a tokenizer splits as usual,
    and the same prompt in every per-request tool (``request_path``, ``ttft_ab``,
    ``request_instructions``, ``request_opcodes``), so their figures speak of the same request."""
    words = (PROSE_WORDS[(i * 7 + i // 3) % len(PROSE_WORDS)] for i in itertools.count())
    return words_text(size, words.__next__)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- processes


def start_triton(log_file: Path) -> Any:
    from gateway.triton_launcher import TritonServer

    server = TritonServer(
        REFERENCE_REPOSITORY, log_file=log_file, extra_args=(f"--model-repository={TEST_REPOSITORY}",)
    )
    server.start()
    return server


def triton_pid(server: Any) -> int | None:
    process = getattr(server, "_process", None)
    return process.pid if process is not None else None


@dataclass
class Gateway:
    process: subprocess.Popen[bytes]
    port: int
    log_file: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float | None:
        return proc_cpu_seconds(self.pid)

    def rss_bytes(self) -> int | None:
        return proc_rss_bytes(self.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_gateway(
    triton_url: str,
    log_file: Path,
    extra_args: list[str],
    root: Path | None = None,
    program: Sequence[str] | None = None,
    ready_within: float = 60.0,
) -> Gateway:
    """A gateway process; ``root``: run the ``gateway`` package of another tree (a checkout of the
    code before a change, for before/after runs on the same Triton); ``program``: run this instead
    of ``python -m gateway`` with the same flags (``relay_floor.py``, or either under valgrind, whose
    start takes longer than ``ready_within``'s default)."""
    from gateway.triton_launcher import free_port

    port = free_port()
    command = [
        *(program or [sys.executable, "-m", "gateway"]),
        "--triton-url",
        triton_url,
        "--port",
        str(port),
        "--model-repository",
        str(REFERENCE_REPOSITORY),
        "--log-level",
        "warning",
        *extra_args,
    ]
    handle = open(log_file, "ab")  # noqa: SIM115 - lives as long as the process
    env = None
    if root is not None:
        env = {**os.environ, "PYTHONPATH": str(root)}
    process = subprocess.Popen(  # noqa: S603
        command, stdout=handle, stderr=subprocess.STDOUT, cwd=root or ROOT, env=env
    )
    gateway = Gateway(process, port, log_file)
    deadline = time.monotonic() + ready_within
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gateway exited early:\n{log_file.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(gateway.url + "/health/ready", timeout=2) as reply:  # noqa: S310
                if reply.status == 200:
                    return gateway
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    gateway.stop()
    raise RuntimeError(f"gateway not ready:\n{log_file.read_text(errors='replace')[-3000:]}")


def firehose_spec(triton: Any, gateway: Gateway, *, warmup: float, duration: float, **extra: Any) -> dict[str, Any]:
    """A ``run_load`` spec streaming the firehose model through this Triton (floor) or gateway,
    watching both processes' CPU; ``extra`` adds or overrides fields."""
    return {
        "grpc_url": triton.grpc_url,
        "host": "127.0.0.1",
        "port": gateway.port,
        "model": "firehose",
        "stream": True,
        "token_text": FIREHOSE_TOKEN,
        "warmup": warmup,
        "duration": duration,
        "watch_pids": {"gateway": gateway.pid, "triton": triton_pid(triton)},
        **extra,
    }


def run_load(spec: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
    """Run one load client in its own process (bench/loadgen.py) and return its JSON result."""
    text = json.dumps(spec)
    spec_file = None
    if len(text) > 100_000:  # over one argument's limit (128 KiB): through a file
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            handle.write(text)
        spec_file = Path(handle.name)
        text = f"@{spec_file}"
    command = [sys.executable, str(BENCH / "loadgen.py"), text]
    limit = timeout or (spec["warmup"] + spec["duration"] + spec.get("drain_timeout", 60.0) + 60)
    try:
        done = subprocess.run(command, capture_output=True, timeout=limit, cwd=ROOT, check=False)  # noqa: S603
    finally:
        if spec_file is not None:
            spec_file.unlink(missing_ok=True)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"load client failed ({done.returncode}):\n{done.stderr.decode(errors='replace')[-3000:]}")
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


# --------------------------------------------------------------------------- machine facts


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for package in (
        "grpcio",
        "tritonclient",
        "nvidia-pytriton",
        "uvicorn",
        "uvloop",
        "httptools",
        "fastapi",
        "starlette",
        "orjson",
        "pydantic",
    ):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": os.getloadavg(),
        "packages": versions,
        "tritonserver": "2.51.0 (nvidia-pytriton 0.7.0 wheel)",
    }


# --------------------------------------------------------------------------- idle streams


def paced_script(tokens: int, delay: float) -> str:
    """A scripted-model prompt: ``tokens`` responses of ``"tok "``, ``delay`` seconds apart."""
    return json.dumps({"responses": [{"utf8": [FIREHOSE_TOKEN], "delay": delay}] * tokens})


def slow_script(first_tokens: int = 1, hold_s: float = 120.0) -> str:
    """A scripted-model prompt: some tokens at once, then one token after ``hold_s`` seconds."""
    responses: list[dict[str, Any]] = [{"utf8": ["tok "]} for _ in range(first_tokens)]
    responses.append({"utf8": ["tok "], "delay": hold_s})
    return json.dumps({"responses": responses})


async def _open_idle_stream(host: str, port: int, body: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    buffer = b""
    while b"tok " not in buffer:  # headers, then the first token: the stream is open and idle
        chunk = await asyncio.wait_for(reader.read(65536), timeout=60)
        if not chunk:
            raise RuntimeError(f"stream closed before its first token: {buffer[:300]!r}")
        buffer += chunk
    if not buffer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected reply: {buffer[:300]!r}")
    return reader, writer


async def _idle_round(gateway: Gateway, body: bytes, count: int, label: str, settle: float) -> dict[str, Any]:
    await asyncio.sleep(settle)
    before = gateway.rss_bytes() or 0
    started = time.perf_counter()
    opened = await asyncio.gather(
        *(_open_idle_stream("127.0.0.1", gateway.port, body) for _ in range(count)), return_exceptions=True
    )
    streams = [s for s in opened if not isinstance(s, BaseException)]
    failures = [repr(s)[:200] for s in opened if isinstance(s, BaseException)]
    open_s = time.perf_counter() - started
    await asyncio.sleep(settle)
    during = gateway.rss_bytes() or 0
    cpu0 = gateway.cpu_seconds() or 0.0
    await asyncio.sleep(2.0)
    idle_cpu = (gateway.cpu_seconds() or 0.0) - cpu0
    for _, writer in streams:
        writer.close()
    await asyncio.gather(*(w.wait_closed() for _, w in streams), return_exceptions=True)
    await asyncio.sleep(settle)
    after = gateway.rss_bytes() or 0
    return {
        "round": label,
        "streams_open": len(streams),
        "failures": len(failures),
        "failure_samples": failures[:3],
        "open_all_s": open_s,
        "rss_before_mb": before / 2**20,
        "rss_open_mb": during / 2**20,
        "rss_after_close_mb": after / 2**20,
        "kb_per_stream": (during - before) / max(1, len(streams)) / 1024,
        "idle_cpu_s_per_s": idle_cpu / 2.0,
    }


async def _idle_rounds(gateway: Gateway, count: int, settle: float, warm_rounds: int) -> list[dict[str, Any]]:
    body = json.dumps({"model": "scripted", "prompt": slow_script(), "max_tokens": 16, "stream": True}).encode()
    await _idle_round(gateway, body, 8, "first-use", settle)  # imports, first-request caches
    rounds = [await _idle_round(gateway, body, count, "cold", settle)]
    for number in range(warm_rounds):
        rounds.append(await _idle_round(gateway, body, count, f"warm {number + 1}", settle))
    return rounds


def idle_stream_memory(
    triton_url: str, workdir: Path, count: int, settle: float = 1.5, warm_rounds: int = 1
) -> dict[str, Any]:
    """Gateway memory per open idle stream, on a fresh gateway process (so no earlier load has
    already grown its heap): ``count`` streams that got one token and then stay silent.

    Rounds: *cold* (the first time the process holds ``count`` streams: what a stream costs,
    the figure held against the target), then ``warm_rounds`` times *warm* (the same again after
    closing them: memory the allocator kept is reused, so growth that goes on round after round
    is a leak, and growth that stops is a bound)."""
    gateway = start_gateway(triton_url, workdir / "gateway-idle.log", ["--max-concurrent-requests=0"])
    try:
        rounds = asyncio.run(_idle_rounds(gateway, count, settle, warm_rounds))
        rounds[-1]["gateway_requests_running_after"] = None
    finally:
        gateway.stop()
    return {
        "count": count,
        "rounds": rounds,
        "kb_per_stream": rounds[0]["kb_per_stream"],
        "kb_per_stream_warm": rounds[1]["kb_per_stream"],
        "kb_per_stream_warm_rounds": [r["kb_per_stream"] for r in rounds[1:]],
    }
