"""``prompts``: does a prompt's size cost the gateway anything?

* **sweep**: TTFT p50 at c = 1 for prompts of 100 B, 10 KB and 100 KB on both endpoints,
  16-token streams, floor and variants alternated as in ``load``; the figure is the TTFT a
  variant adds over the floor's. Anything O(prompt) on the gateway's path shows as a slope.
* **stall**: a ``scripted`` stream paced at one token per 2 ms, read alone and then while 20
  chat requests with a 100 KB prompt arrive 50 ms apart; its gap p99 while they are in flight
  over its idle p99. Anything O(prompt) on the event loop stalls every other stream.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.load import FLOOR, load_spec, run_client, run_level, summarize, warm
from bench.report import Report, fmt, ratio
from bench.scenarios import CHAT, WORDS_SEED, Scenario, paced_script, prompt_text, sweep_scenarios
from bench.stack import Stack, Variant, log


def sweep(args: Any, stack: Stack, names: list[str], report: Report) -> None:
    header = ["endpoint, prompt", "floor TTFT p50 ms", *(f"{n}: added ms" for n in names), "errors"]
    table, records = [], []
    for scenario in sweep_scenarios([int(s) for s in args.sizes.split(",")], args.tokens):

        def build(side: str, s: Scenario = scenario) -> dict[str, Any]:
            return load_spec(stack, side, s, 1, args.warmup, args.duration)

        summary = summarize(run_level(stack, [FLOOR, *names], scenario.name, build, args.repeat), names)
        record = {"scenario": scenario.name, "path": scenario.path, "prompt_bytes": scenario.prompt_bytes}
        records.append({**record, "medians": summary})
        errors = sum(s["errors"] for s in summary.values())
        added = [fmt(summary[n]["added_ttft_p50_ms"], 2, sign=True) for n in names]
        table.append([scenario.what, fmt(summary[FLOOR]["ttft_p50_ms"], 2), *added, str(errors)])
    report.add(f"## Added TTFT by prompt size (c = 1, {args.tokens}-token streams, medians of {args.repeat})", "")
    report.table(header, table)
    report.data["sweep"] = records


def stall(args: Any, stack: Stack, names: list[str], report: Report) -> None:
    base = {
        "target": "stall",
        "grpc_url": stack.triton.grpc_url,
        "host": "127.0.0.1",
        "stream_prompt": paced_script(2000, 0.002),
        "stream_tokens": 2000,
        "big_prompt": prompt_text(100_000, WORDS_SEED + 1),
        "big_path": CHAT,
        "big_count": 20,
        "big_interval": 0.05,
    }
    table, results = [], {}
    for side in [FLOOR, *names]:
        port = 0 if side == FLOOR else stack.gateways[side].port
        result = run_client({**base, "side": "floor" if side == FLOOR else "http", "port": port})
        result["loaded_over_idle"] = ratio(result["loaded_gap_p99_ms"], result["idle_gap_p99_ms"])
        results[side] = result
        log(
            f"  stall {side}: idle gap p99 {fmt(result['idle_gap_p99_ms'], 2)} ms, "
            f"loaded {fmt(result['loaded_gap_p99_ms'], 2)} ms"
        )
        table.append(
            [
                side,
                fmt(result["idle_gap_p99_ms"], 2),
                fmt(result["loaded_gap_p99_ms"], 2),
                fmt(result["loaded_over_idle"], 2),
                fmt(result["loaded_gap_max_ms"], 2),
                fmt(result["big_latency_p50_ms"], 1),
            ]
        )
    report.add("## A paced stream while 20 chat requests with a 100 KB prompt arrive", "")
    header = [
        "side",
        "idle gap p99 ms",
        "loaded gap p99 ms",
        "loaded / idle",
        "loaded gap max ms",
        "100 KB request p50 ms",
    ]
    report.table(header, table)
    report.data["stall"] = results


def run(args: Any, variants: list[Variant], report: Report) -> None:
    names = [v.name for v in variants]
    with Stack(variants, Path(tempfile.mkdtemp(prefix="bench-prompts-")), tuple(args.gateway_arg)) as stack:
        warm(stack)
        if "sweep" in args.sections:
            sweep(args, stack, names, report)
        if "stall" in args.sections:
            log("stall")
            stall(args, stack, names, report)
