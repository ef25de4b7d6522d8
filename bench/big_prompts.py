"""Large prompts against the floor, in one run: does a prompt's size cost the gateway anything?

Three sections, each floor (``tritonclient.grpc.aio`` straight to Triton) against gateway, every
client in its own process (``loadgen.py``, ``stallgen.py``), on a tritonserver and a gateway this
script starts (issue 13):

* **prompt-size sweep**: TTFT p50 at concurrency 1 for prompts of ``--sizes`` bytes (100 B,
  10 KB, 100 KB), on ``/v1/completions`` and ``/v1/chat/completions`` (one user message), firehose
  model, ``--sweep-tokens`` tokens per request; the figure is the TTFT the gateway *adds*.
* **stall**: a paced stream (``scripted``, one token every 2 ms) read alone, then while
  ``--stall-count`` chat requests with a ``--stall-bytes`` prompt arrive; gap p99 and max of the
  paced stream (``stallgen.py``).
* **chat workload**: ``/v1/chat/completions`` with a ``--chat-bytes`` prompt and
  ``--chat-tokens``-token streams at ``--chat-concurrency`` streams: tokens/s against the floor,
  TTFT, gateway CPU per token. Each run lasts a fixed window; streams still running when it closes
  are cancelled (at 256 streams of 1000 tokens one request outlives any short window). The same
  load also runs through ``relay_floor.py`` (the bare relay: the gateway's transport and parse,
  one chunk encoded and written per response, nothing else), whose CPU per token is what any
  Python relay pays on this machine; ``--no-relay-floor`` leaves it out. At c=1, the sides then
  also answer ``--alternating-requests`` requests each in turn, request by request
  (``ttft_ab.alternate``): the added TTFT from moments of the box all sides share, where a window
  per side (~25 requests at c=1) sees moments of its own.

Prompts are words drawn with a fixed seed (``prompt_text``), ASCII, as a RAG context would be.

Run:  .venv/bin/python bench/big_prompts.py                    (about 5 minutes)
      .venv/bin/python bench/big_prompts.py --quick            (about 2 minutes)
      .venv/bin/python bench/big_prompts.py --gateway-root /tmp/base   (the gateway of another tree)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BENCH,
    REFERENCE_REPOSITORY,
    RELAY_PROGRAM,
    TEST_REPOSITORY,
    exit_on_sigterm,
    firehose_spec,
    fmt,
    log,
    machine_info,
    paced_script,
    run_load,
    start_gateway,
    start_triton,
    words_text,
)

WORDS_SEED = 13


def prompt_text(size: int, seed: int = WORDS_SEED) -> str:
    """``size`` bytes of lowercase words and spaces (deterministic)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(3000)]
    return words_text(size, lambda: rng.choice(vocabulary))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Large prompts: TTFT by prompt size, stalls of other streams, the chat workload; "
        "floor vs gateway in one run. Starts its own tritonserver and gateway.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--sizes", default="100,10000,100000", help="prompt sizes of the sweep, in bytes")
    parser.add_argument("--sweep-endpoints", default="completions,chat", help="endpoints of the sweep")
    parser.add_argument("--sweep-tokens", type=int, default=16, help="tokens per request in the sweep")
    parser.add_argument("--stall-count", type=int, default=20, help="large requests sent during the stall test")
    parser.add_argument("--stall-bytes", type=int, default=100_000, help="prompt size of those requests")
    parser.add_argument("--stall-interval", type=float, default=0.05, help="seconds between them")
    parser.add_argument("--stall-tokens", type=int, default=2000, help="tokens of the paced stream")
    parser.add_argument("--stall-delay", type=float, default=0.002, help="seconds between its tokens")
    parser.add_argument("--chat-concurrency", default="1,16,64,256", help="streams of the chat workload")
    parser.add_argument("--chat-bytes", type=int, default=10_000, help="prompt size of the chat workload")
    parser.add_argument("--chat-tokens", type=int, default=1000, help="tokens per chat stream")
    parser.add_argument("--duration", type=float, default=8.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of load before the window opens")
    parser.add_argument(
        "--repeat", type=int, default=1, help="floor/gateway pairs per cell, alternating order; medians are reported"
    )
    parser.add_argument("--quick", action="store_true", help="3 s windows, 1 s warm-up, fewer levels")
    parser.add_argument("--sections", default="sweep,stall,chat", help="which sections to run")
    parser.add_argument("--gateway-root", type=Path, default=None, help="run the gateway package of this tree")
    parser.add_argument("--gateway-arg", action="append", default=[], help="extra gateway CLI argument")
    parser.add_argument(
        "--relay-floor",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the chat workload through relay_floor.py, the bare relay",
    )
    parser.add_argument(
        "--alternating-requests",
        type=int,
        default=60,
        help="at c=1 of the chat workload, requests per side answered in turn by floor, gateway and relay (0: none)",
    )
    parser.add_argument(
        "--pin-gateway",
        type=int,
        default=None,
        metavar="CPU",
        help="run the gateway and the relay on this CPU alone, and Triton, its stubs and the load "
        "clients on the others (the gateway's own core, as a pod with a CPU request would have it)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=BENCH / "results" / "big-prompts.json",
        help="the JSON's path; the Markdown table goes next to it, with the suffix .md",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.warmup = 3.0, 1.0
        if args.chat_concurrency == parser.get_default("chat_concurrency"):
            args.chat_concurrency = "1,16,64"
    # The JSON goes to ``--output`` and the table next to it: a ``.md`` path names the table.
    args.output = args.output.resolve().with_suffix(".json")
    return args


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _ratio(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return None
    return a / b


def _diff(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return None
    return a - b


def _median_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's result as it is; several runs' as the median of each number (errors summed),
    with each run's headline figures kept under ``runs``."""
    if len(results) == 1:
        return results[0]
    merged = dict(results[0])
    for key, value in results[0].items():
        values = [r.get(key) for r in results]
        if key == "errors":
            merged[key] = sum(v for v in values if isinstance(v, (int, float)))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            numbers = [v for v in values if isinstance(v, (int, float))]
            merged[key] = statistics.median(numbers) if numbers else None
    headline = ("tokens_per_s", "ttft_p50_ms", "gateway_cpu_us_per_token")
    merged["runs"] = [{key: r.get(key) for key in headline} for r in results]
    return merged


def triton_failed(triton: Any) -> bool:
    """Whether tritonserver died during a level: exited, or aborting. After ``double free or
    corruption`` tritonserver 2.51 can sit in its signal handler for tens of seconds with its
    sockets open, so its calls neither answer nor fail (a level then reads 0 tokens and 0
    errors) and only its log tells."""
    return not triton.running or "Signal (6) received" in triton.log_tail(80)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = Path(tempfile.mkdtemp(prefix="gw-bigprompts-"))
        self.triton: Any = None
        self.gateway: Any = None
        self.relay: Any = None
        """``relay_floor.py`` on the same Triton, during the chat section."""
        self.starts = 0
        self.triton_deaths: list[int] = []
        """Chat levels before which Triton was found dead (0: at the end of the run)."""
        self.triton_reruns: list[int] = []
        """Chat levels run again because Triton died during them."""

    def pin(self, server: Any) -> None:
        """Put every thread of ``server`` on ``--pin-gateway``'s CPU (threads started later inherit it)."""
        if self.args.pin_gateway is None:
            return
        for task in Path(f"/proc/{server.pid}/task").iterdir():
            os.sched_setaffinity(int(task.name), {self.args.pin_gateway})

    def spec(self, server: Any = None, **extra: Any) -> dict[str, Any]:
        window = {"warmup": self.args.warmup, "duration": self.args.duration}
        return firehose_spec(self.triton, server or self.gateway, **{**window, **extra})

    def pair(self, label: str, **extra: Any) -> dict[str, Any]:
        """Floor and gateway (and the bare relay, when it runs) on the same load, ``--repeat``
        times, in order then in reverse order, alternately (floor, gateway, relay; relay, gateway,
        floor; ...); each side's numbers are the medians over its runs."""
        sides = ["floor", "gateway"] + (["relay"] if self.relay is not None else [])
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        for round_ in range(self.args.repeat):
            for side in sides if round_ % 2 == 0 else sides[::-1]:
                target = "floor" if side == "floor" else "http"
                server = self.relay if side == "relay" else None
                result = run_load(self.spec(server, target=target, **extra))
                runs[side].append(result)
                log(
                    f"  {label} {side:7s} {result['tokens_per_s']:8.0f} tok/s ttft p50 "
                    f"{fmt(result['ttft_p50_ms'])} ms errors {result['errors']}"
                )
        return {side: _median_of(results) for side, results in runs.items()}

    # ------------------------------------------------------------------ sections
    def sweep(self) -> list[dict[str, Any]]:
        rows = []
        tokens = self.args.sweep_tokens
        for endpoint in [e.strip() for e in self.args.sweep_endpoints.split(",") if e.strip()]:
            path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
            for size in _ints(self.args.sizes):
                log(f"sweep {endpoint} {size} B")
                pair = self.pair(
                    f"{endpoint} {size} B",
                    path=path,
                    prompt=prompt_text(size),
                    concurrency=1,
                    max_tokens=tokens,
                    expect_tokens=tokens,
                )
                floor, gateway = pair["floor"]["ttft_p50_ms"], pair["gateway"]["ttft_p50_ms"]
                rows.append(
                    {
                        "endpoint": endpoint,
                        "bytes": size,
                        **pair,
                        "added_ttft_p50_ms": _diff(gateway, floor),
                        "ttft_ratio": _ratio(gateway, floor),
                    }
                )
        return rows

    def stall(self) -> dict[str, Any]:
        args = self.args
        spec = {
            "grpc_url": self.triton.grpc_url,
            "host": "127.0.0.1",
            "port": self.gateway.port,
            "stream_prompt": paced_script(args.stall_tokens, args.stall_delay),
            "stream_tokens": args.stall_tokens,
            "big_prompt": prompt_text(args.stall_bytes, seed=WORDS_SEED + 1),
            "big_path": "/v1/chat/completions",
            "big_max_tokens": 16,
            "big_count": args.stall_count,
            "big_interval": args.stall_interval,
            "big_start": 0.5,
        }
        out: dict[str, Any] = {"count": args.stall_count, "bytes": args.stall_bytes, "delay_s": args.stall_delay}
        for target in ("floor", "http"):
            spec_file = self.workdir / f"stall-{target}.json"
            spec_file.write_text(json.dumps({**spec, "target": target}))
            command = [sys.executable, str(BENCH / "stallgen.py"), f"@{spec_file}"]
            done = subprocess.run(command, capture_output=True, timeout=300, check=False)  # noqa: S603
            if done.returncode != 0:
                raise RuntimeError(f"stall client failed:\n{done.stderr.decode(errors='replace')[-3000:]}")
            result = json.loads(done.stdout.decode().strip().splitlines()[-1])
            out["floor" if target == "floor" else "gateway"] = result
            log(
                f"  stall {target}: idle gap p99 {fmt(result['idle']['gap_p99_ms'], 2)} ms, loaded p99 "
                f"{fmt(result['loaded']['gap_p99_ms'], 2)} max {fmt(result['loaded']['gap_max_ms'], 2)} ms"
            )
        gateway = out["gateway"]
        out["gateway_loaded_over_idle_p99"] = _ratio(gateway["loaded"]["gap_p99_ms"], gateway["idle"]["gap_p99_ms"])
        out["gateway_over_floor_loaded_p99"] = _ratio(
            gateway["loaded"]["gap_p99_ms"], out["floor"]["loaded"]["gap_p99_ms"]
        )
        return out

    def start_stack(self) -> None:
        self.starts += 1
        log("starting tritonserver")
        self.triton = start_triton(self.workdir / f"tritonserver-{self.starts}.log")
        # The test models' model.json names tiny-llm's tokenizer and chat template (and a context
        # of 1,000,000 tokens): the gateway tokenizes and renders for firehose as for a real model.
        repositories = f"--model-repository={REFERENCE_REPOSITORY},{TEST_REPOSITORY}"
        self.gateway = start_gateway(
            self.triton.grpc_url,
            self.workdir / f"gateway-{self.starts}.log",
            [repositories, *self.args.gateway_arg],
            root=self.args.gateway_root,
        )
        self.pin(self.gateway)
        log(f"gateway pid {self.gateway.pid} on {self.gateway.url}; warm-up")
        run_load(self.spec(target="http", concurrency=4, warmup=0.0, duration=1.0, max_tokens=16))

    def start_relay(self) -> None:
        self.relay = start_gateway(
            self.triton.grpc_url,
            self.workdir / f"relay-{self.starts}.log",
            [],
            program=RELAY_PROGRAM,
        )
        self.pin(self.relay)

    def stop_stack(self) -> bool:
        """Stop the gateway, the relay and Triton; whether Triton had died on its own."""
        died = False
        if self.relay is not None:
            self.relay.stop()
            self.relay = None
        if self.gateway is not None:
            self.gateway.stop()
            self.gateway = None
        if self.triton is not None:
            died = triton_failed(self.triton)
            self.triton.stop()
            self.triton = None
        return died

    def chat(self) -> list[dict[str, Any]]:
        """Each level on a fresh Triton and gateway: a level ends by cancelling every stream still
        running, and tritonserver 2.51 aborts now and then on such cancellations (gRPC's
        ``sync.cc:105 ASSERTION FAILED: prior > 0``; a race between a cancellation and the
        request's completion in its gRPC frontend, fixed in Triton 24.12 by
        triton-inference-server/server#7840), which would fail every later level. A level during
        which Triton died is run once more on a fresh stack: its figures would measure 503s."""
        args = self.args
        levels = []
        prompt = prompt_text(args.chat_bytes, seed=WORDS_SEED + 2)
        for concurrency in _ints(args.chat_concurrency):
            for attempt in (1, 2):
                # A death during this level's first attempt is in ``triton_reruns`` already.
                if self.stop_stack() and attempt == 1:
                    log("tritonserver had died during the previous level")
                    self.triton_deaths.append(concurrency)
                self.start_stack()
                if args.relay_floor:
                    self.start_relay()
                log(f"chat workload c={concurrency}")
                pair = self.pair(
                    f"chat c={concurrency}",
                    path="/v1/chat/completions",
                    prompt=prompt,
                    concurrency=concurrency,
                    max_tokens=args.chat_tokens,
                    expect_tokens=args.chat_tokens,
                    warmup=max(args.warmup, 2.0 if concurrency < 64 else 3.0),
                    drain_timeout=0.5,
                )
                assert self.triton is not None
                if not triton_failed(self.triton) or attempt == 2:
                    break
                log(f"tritonserver died during the level c={concurrency}: running it again")
                self.triton_reruns.append(concurrency)
            floor, gateway = pair["floor"], pair["gateway"]
            relay = pair.get("relay") or {}
            alternating = self.alternating(prompt) if concurrency == 1 and args.alternating_requests else None
            levels.append(
                {
                    "concurrency": concurrency,
                    **pair,
                    "alternating": alternating,
                    "tokens_ratio": _ratio(gateway["tokens_per_s"], floor["tokens_per_s"]),
                    "added_ttft_p50_ms": _diff(gateway["ttft_p50_ms"], floor["ttft_p50_ms"]),
                    "cpu_over_relay": _ratio(
                        gateway.get("gateway_cpu_us_per_token"), relay.get("gateway_cpu_us_per_token")
                    ),
                }
            )
        return levels

    def alternating(self, prompt: str) -> dict[str, Any]:
        """The chat workload at c=1, request by request: floor, gateway and relay answer the same
        request in turn (``ttft_ab.alternate``, A B C then C B A), on the level's stack."""
        from ttft_ab import FloorSide, HttpSide, Side, alternate

        args = self.args
        assert self.triton is not None and self.gateway is not None

        async def run() -> dict[str, list[float]]:
            sides: dict[str, Side] = {
                "floor": FloorSide(self.triton.grpc_url),
                "gateway": await HttpSide.connect(self.gateway),
            }
            if self.relay is not None:
                sides["relay"] = await HttpSide.connect(self.relay)
            try:
                await alternate(sides, "chat", prompt, args.chat_tokens, requests=3)  # warm-up
                return await alternate(sides, "chat", prompt, args.chat_tokens, requests=args.alternating_requests)
            finally:
                for side in sides.values():
                    await side.close()

        log(f"  chat c=1, {args.alternating_requests} requests per side in turn")
        try:
            ttft = asyncio.run(run())
        except Exception as exc:  # noqa: BLE001 - Triton dying mid-run: say so, keep the windows' figures
            log(f"  the requests in turn failed: {type(exc).__name__}: {exc}")
            return {"requests": args.alternating_requests, "error": f"{type(exc).__name__}: {exc}"}
        out: dict[str, Any] = {side: statistics.median(times) * 1e3 for side, times in ttft.items()}
        out["requests"] = args.alternating_requests
        out["added_ttft_p50_ms"] = out["gateway"] - out["floor"]
        sides = ", ".join(f"{side} {out[side]:.2f} ms" for side in ttft)
        log(f"  {sides}: added {out['added_ttft_p50_ms']:+.2f}")
        return out

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, Any]:
        args = self.args
        started = time.time()
        result: dict[str, Any] = {
            "command": " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/big_prompts.py", *sys.argv[1:]]),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine_info(),
            "gateway_root": str(args.gateway_root or Path(__file__).resolve().parent.parent),
        }
        if args.pin_gateway is not None:  # Triton and the load clients inherit the other CPUs
            others = set(range(os.cpu_count() or 1)) - {args.pin_gateway}
            os.sched_setaffinity(0, others)
            result["pinned_gateway_cpu"] = args.pin_gateway
        try:
            self.start_stack()
            sections = {name.strip() for name in args.sections.split(",")}
            result["sweep"] = self.sweep() if "sweep" in sections else []
            if "stall" in sections:
                log("stall test")
                result["stall"] = self.stall()
            result["chat"] = self.chat() if "chat" in sections else []
            result["loadavg_at_end"] = os.getloadavg()
        finally:
            if self.stop_stack():
                self.triton_deaths.append(0)
            result["triton_died_before_level"] = self.triton_deaths
            result["levels_rerun_after_triton_died"] = self.triton_reruns
        result["elapsed_s"] = time.time() - started
        result["targets"] = targets(result)
        return result


# --------------------------------------------------------------------------- targets and tables


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, bar: str, met: bool | None) -> None:
        out.append({"target": name, "value": value, "bar": bar, "met": met})

    bars = {100: 0.5, 10_000: 1.0, 100_000: 3.0}
    for row in result.get("sweep", []):
        bar = bars.get(row["bytes"])
        value = row["added_ttft_p50_ms"]
        if bar is not None and row["endpoint"] == "completions":
            add(
                f"added TTFT p50 at c=1, {row['bytes']} B prompt (ms)",
                value,
                f"<= {bar}",
                value is not None and value <= bar,
            )
    stall = result.get("stall")
    if stall:
        value = stall["gateway_loaded_over_idle_p99"]
        add("other stream's gap p99 while large prompts arrive / idle", value, "<= 2", value is not None and value <= 2)
    for level in result.get("chat", []):
        if level["concurrency"] >= 16:
            value = level["tokens_ratio"]
            add(
                f"chat workload tokens/s gateway/floor at c={level['concurrency']}",
                value,
                ">= 0.95",
                value is not None and value >= 0.95,
            )
        else:
            value = level["added_ttft_p50_ms"]
            add(
                f"chat workload added TTFT p50 at c={level['concurrency']} (ms)",
                value,
                "<= 1",
                value is not None and value <= 1,
            )
            alternating = level.get("alternating")
            if alternating and "error" not in alternating:
                value = alternating["added_ttft_p50_ms"]
                add(
                    f"same, {alternating['requests']} requests per side in turn (ms)",
                    value,
                    "<= 1",
                    value <= 1,
                )
    cpus = [lv["gateway"].get("gateway_cpu_us_per_token") for lv in result.get("chat", [])]
    cpus = [c for c in cpus if c is not None]
    if cpus:
        add("chat workload gateway CPU µs per token (worst level)", max(cpus), "<= 40", max(cpus) <= 40)
    return out


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        f"Run {result['started']}, {result['elapsed_s']:.0f} s. Machine: {m['cpu']}, {m['cores']} cores, "
        f"Python {m['python']}, load average at start {m['loadavg_at_start'][0]:.2f}, at end "
        f"{result.get('loadavg_at_end', [0])[0]:.2f}. Gateway from `{result['gateway_root']}`.",
        "",
        f"Command: `{result['command']}`",
        "",
        "### Prompt-size sweep (c=1, TTFT p50)",
        "",
        "| endpoint | prompt | floor ms | gateway ms | added ms | gateway/floor |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["sweep"]:
        lines.append(
            f"| {row['endpoint']} | {row['bytes']:,} B | {fmt(row['floor']['ttft_p50_ms'], 2)} | "
            f"{fmt(row['gateway']['ttft_p50_ms'], 2)} | {fmt(row['added_ttft_p50_ms'], 2)} | "
            f"{fmt(row['ttft_ratio'], 2)} |"
        )
    stall = result.get("stall") or {}
    if stall:  # not run with --sections without stall
        lines += [
            "",
            f"### Stall: a stream at one token per {stall['delay_s'] * 1000:.0f} ms while {stall['count']} chat "
            f"requests with a {stall['bytes']:,} B prompt arrive",
            "",
            "| client | idle gap p50 / p99 / max ms | loaded gap p50 / p99 / max ms | loaded p99 / idle p99 "
            "| large request p50 ms |",
            "|---|---|---|---:|---:|",
        ]
    for who in ("floor", "gateway") if "floor" in stall else ():
        r = stall[who]
        idle, loaded = r["idle"], r["loaded"]
        lines.append(
            f"| {who} | {fmt(idle['gap_p50_ms'], 2)} / {fmt(idle['gap_p99_ms'], 2)} / {fmt(idle['gap_max_ms'], 2)} | "
            f"{fmt(loaded['gap_p50_ms'], 2)} / {fmt(loaded['gap_p99_ms'], 2)} / {fmt(loaded['gap_max_ms'], 2)} | "
            f"{fmt(_ratio(loaded['gap_p99_ms'], idle['gap_p99_ms']), 2)} | {fmt(r['big_latency_p50_ms'], 1)} |"
        )
    lines += [
        "",
        "### Chat workload (chat endpoint, ~10 KB prompt, 1000-token streams)",
        "",
        "| c | floor tok/s | gateway tok/s | gateway/floor | TTFT p50 floor / gateway ms | gw CPU µs/token "
        "| of which kernel | gw context switches/token | relay floor CPU µs/token (kernel) | gw CPU / relay's "
        "| floor client CPU µs/token | errors |",
        "|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for level in result["chat"]:
        f, g, r = level["floor"], level["gateway"], level.get("relay") or {}
        errors = f"{f['errors']} / {g['errors']}" + (f" / {r['errors']}" if r else "")
        lines.append(
            f"| {level['concurrency']} | {fmt(f['tokens_per_s'])} | {fmt(g['tokens_per_s'])} | "
            f"{fmt(level['tokens_ratio'], 2)} | {fmt(f['ttft_p50_ms'], 1)} / {fmt(g['ttft_p50_ms'], 1)} | "
            f"{fmt(g.get('gateway_cpu_us_per_token'))} | {fmt(g.get('gateway_sys_us_per_token'))} | "
            f"{fmt(g.get('gateway_switches_per_token'), 2)} | "
            f"{fmt(r.get('gateway_cpu_us_per_token'))} ({fmt(r.get('gateway_sys_us_per_token'))}) | "
            f"{fmt(level.get('cpu_over_relay'), 2)} | {fmt(f.get('client_cpu_us_per_token'))} | {errors} |"
        )
    for level in result["chat"]:
        alternating = level.get("alternating")
        if alternating and "error" in alternating:
            lines += ["", f"At c={level['concurrency']}, the requests in turn failed: {alternating['error']}"]
        elif alternating:
            sides = [side for side in ("floor", "gateway", "relay") if side in alternating]
            lines += [
                "",
                f"At c={level['concurrency']}, {alternating['requests']} requests per side answered in turn "
                f"({', '.join(sides)}, then back): TTFT p50 "
                + " / ".join(f"{side} {fmt(alternating[side], 2)}" for side in sides)
                + f" ms; the gateway adds {fmt(alternating['added_ttft_p50_ms'], 2)} ms.",
            ]
    if result.get("triton_died_before_level"):
        lines += ["", f"Triton died (and was restarted) before levels {result['triton_died_before_level']}."]
    if result.get("levels_rerun_after_triton_died"):
        lines += ["", f"Levels run again because Triton died during them: {result['levels_rerun_after_triton_died']}."]
    lines += ["", "### Targets", "", "| target | value | bar | met |", "|---|---:|---:|---|"]
    for t in result["targets"]:
        lines.append(f"| {t['target']} | {fmt(t['value'], 2)} | {t['bar']} | {'yes' if t['met'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    exit_on_sigterm()
    result = Bench(args).run()
    args.output.write_text(json.dumps(result, indent=1, default=str))
    text = markdown(result)
    args.output.with_suffix(".md").write_text(text)
    print(text)
    print(f"JSON: {args.output}\nMarkdown: {args.output.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
