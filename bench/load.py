"""``load``: the scenarios against the floor and every variant, alternated in one run.

One tritonserver and one gateway per variant run for the whole command (the idle gateways
cost nothing measurable). For each scenario and concurrency, ``--repeat`` rounds each run the
floor and then every variant, in reverse order every other round (floor, a, b; b, a, floor;
...), so a slow minute of a shared machine falls on every side alike. Each run is a fresh load
client process with a warm-up and a measured window; a side's figures are the medians of its
runs.

Figures per side: tokens/s, its ratio to the floor and to the first variant; TTFT p50 and what
it adds over the floor's; the gateway's CPU per token (its process and children, from ``/proc``,
over the window) and its ratio to the first variant's.

tritonserver 2.51 now and then aborts when many streams are cancelled at once (the end of a
window): a level during which it died is run again on a fresh stack, once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import Report, difference, fmt, median_of, ratio
from bench.scenarios import FIREHOSE_TOKEN, Scenario
from bench.stack import ROOT, Stack, Variant, log, triton_failed, triton_pid

FLOOR = "floor"
SpecFor = Callable[[str], dict[str, Any]]
"""Makes the spec of one run against a side (``floor`` or a variant's name)."""


def run_client(spec: dict[str, Any]) -> dict[str, Any]:
    """One load client process (``bench.loadgen``); its JSON result."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="bench-spec-", delete=False) as handle:
        json.dump(spec, handle)  # large prompts exceed one argument's 128 KiB
    try:
        limit = spec.get("warmup", 0) + spec.get("duration", 0) + spec.get("drain_timeout", 60.0) + 120
        done = subprocess.run(  # noqa: S603 - our interpreter and module
            [sys.executable, "-m", "bench.loadgen", f"@{handle.name}"], capture_output=True, timeout=limit, cwd=ROOT
        )
    finally:
        Path(handle.name).unlink(missing_ok=True)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"load client failed ({done.returncode}):\n{done.stderr.decode(errors='replace')[-3000:]}")
    return dict(json.loads(done.stdout.decode().splitlines()[-1]))


def load_spec(
    stack: Stack, side: str, scenario: Scenario, concurrency: int, warmup: float, duration: float
) -> dict[str, Any]:
    """The spec of one run of ``scenario`` at ``concurrency`` against ``side``."""
    long = scenario.tokens >= 500
    spec: dict[str, Any] = {
        "target": "floor" if side == FLOOR else "http",
        "grpc_url": stack.triton.grpc_url,
        "host": "127.0.0.1",
        "port": 0,
        "model": "firehose",
        "path": scenario.path,
        "prompt": scenario.prompt,
        "max_tokens": scenario.tokens,
        "expect_tokens": scenario.tokens,
        "stream": scenario.stream,
        "token_text": FIREHOSE_TOKEN,
        "concurrency": concurrency,
        # Long streams at many users need longer to reach steady state; streams still running
        # when the window closes are cancelled rather than waited for (~13 s at c = 64).
        "warmup": max(warmup, 3.0 if long and concurrency >= 64 else 0.0),
        "duration": duration,
        "drain_timeout": 0.5 if long else 30.0,
        "watch": {"triton": triton_pid(stack.triton)},
    }
    if side != FLOOR:
        gateway = stack.gateways[side]
        spec["port"] = gateway.port
        spec["watch"]["gateway"] = gateway.pid
    return spec


def warm(stack: Stack) -> None:
    """A second of light load through each gateway: first-use imports, caches, the connection."""
    for name, gateway in stack.gateways.items():
        spec: dict[str, Any] = {"target": "http", "host": "127.0.0.1", "port": gateway.port, "model": "firehose"}
        spec |= {"path": "/v1/chat/completions", "prompt": "warm up", "max_tokens": 16, "stream": True}
        result = run_client({**spec, "concurrency": 4, "warmup": 0.0, "duration": 1.0})
        if result["errors"]:
            raise RuntimeError(f"gateway {name} fails its warm-up: {result['error_samples']}")


def measure(stack: Stack, sides: list[str], label: str, build: SpecFor, repeat: int) -> dict[str, list[dict[str, Any]]]:
    """``repeat`` rounds of every side in alternating order; ``build(side)`` makes a run's spec."""
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for round_ in range(repeat):
        for side in sides if round_ % 2 == 0 else sides[::-1]:
            result = run_client(build(side))
            runs[side].append(result)
            log(
                f"  {label} {side:>10}: {result['tokens_per_s']:8.0f} tok/s, "
                f"TTFT p50 {fmt(result['ttft_p50_ms'], 2)} ms, "
                f"gateway {fmt(result.get('gateway_cpu_us_per_token'))} µs/token, errors {result['errors']}"
            )
            if triton_failed(stack.triton):
                raise TritonDied(label)
    return runs


class TritonDied(RuntimeError):
    """tritonserver died during a level: its figures would measure 503s."""


def run_level(
    stack: Stack, sides: list[str], label: str, build: SpecFor, repeat: int
) -> dict[str, list[dict[str, Any]]]:
    """A level, once more on a fresh stack if Triton died during it."""
    for attempt in (1, 2):
        try:
            return measure(stack, sides, label, build, repeat)
        except TritonDied:
            if attempt == 2:
                raise
            log(f"tritonserver died during {label}: running it again on a fresh stack")
            stack.restart()
            warm(stack)
    raise AssertionError("unreachable")


def summarize(runs: dict[str, list[dict[str, Any]]], variants: list[str]) -> dict[str, dict[str, Any]]:
    """Medians per side, and each variant against the floor and against the first variant."""
    sides = {side: median_of(results) for side, results in runs.items()}
    floor, first = sides[FLOOR], sides[variants[0]]
    for name in variants:
        side = sides[name]
        side["tokens_over_floor"] = ratio(side["tokens_per_s"], floor["tokens_per_s"])
        side["tokens_over_first"] = ratio(side["tokens_per_s"], first["tokens_per_s"])
        side["added_ttft_p50_ms"] = difference(side["ttft_p50_ms"], floor["ttft_p50_ms"])
        side["cpu_over_first"] = ratio(side.get("gateway_cpu_us_per_token"), first.get("gateway_cpu_us_per_token"))
    return sides


HEADER = [
    "c",
    "side",
    "tokens/s",
    "/ floor",
    "/ first",
    "TTFT p50 ms",
    "added TTFT ms",
    "gateway CPU µs/token",
    "CPU / first",
    "errors",
]


def rows(concurrency: int, sides: dict[str, dict[str, Any]]) -> list[list[str]]:
    out = []
    for name, s in sides.items():
        out.append(
            [
                str(concurrency),
                name,
                fmt(s["tokens_per_s"]),
                fmt(s.get("tokens_over_floor"), 2),
                fmt(s.get("tokens_over_first"), 2),
                fmt(s["ttft_p50_ms"], 2),
                fmt(s.get("added_ttft_p50_ms"), 2, sign=True),
                fmt(s.get("gateway_cpu_us_per_token")),
                fmt(s.get("cpu_over_first"), 2),
                str(s["errors"]),
            ]
        )
    return out


def run(args: Any, variants: list[Variant], scenarios: list[Scenario], report: Report) -> None:
    """``load``: every scenario at every level, floor and variants alternated."""
    names = [v.name for v in variants]
    sides = [FLOOR, *names]
    report.data["scenarios"] = []
    workdir = Path(tempfile.mkdtemp(prefix="bench-load-"))
    with Stack(variants, workdir, tuple(args.gateway_arg)) as stack:
        warm(stack)
        for scenario in scenarios:
            levels = args.concurrency or list(scenario.concurrency)
            report.add(f"## {scenario.name}: {scenario.what}", "")
            table: list[list[str]] = []
            record: dict[str, Any] = {"scenario": scenario.name, "what": scenario.what, "levels": []}
            for concurrency in levels:
                log(f"{scenario.name} c={concurrency}")

                def build(side: str, c: int = concurrency, s: Scenario = scenario) -> dict[str, Any]:
                    return load_spec(stack, side, s, c, args.warmup, args.duration)

                runs = run_level(stack, sides, f"{scenario.name} c={concurrency}", build, args.repeat)
                summary = summarize(runs, names)
                table += rows(concurrency, summary)
                record["levels"].append({"concurrency": concurrency, "medians": summary, "runs": runs})
            report.table(HEADER, table)
            report.data["scenarios"].append(record)
    report.add(
        f"Medians of {args.repeat} run(s) per side and level, {args.duration:.0f} s windows. / floor and / first: "
        f"tokens/s over the floor's and over `{names[0]}`'s; added TTFT: TTFT p50 less the floor's; CPU: the "
        "gateway's process tree, user + system, over the window's tokens.",
        "",
    )
