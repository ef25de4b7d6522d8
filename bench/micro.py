"""``micro``: the gateway's per-token path in one process, without HTTP server or client.

Starts one tritonserver, then runs ``micro_worker.py`` once per variant per round (alternating
order), each a fresh process importing that variant's tree. A figure of the app's own work per
token, steadier than the end-to-end CPU per token because no uvicorn, client socket or client
process shares the measurement; it still includes a wake-up per token. Also: µs per ``feed``
of each tool-call parser, from the first variant's tree.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.otlp_sink import OtlpSink
from bench.report import Report, fmt, ratio
from bench.scenarios import prompt_text
from bench.stack import REFERENCE_REPOSITORY, ROOT, TEST_REPOSITORY, Stack, Variant, log

WORKER = ROOT / "bench" / "micro_worker.py"


def run_worker(variant: Variant, spec: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(variant.root), **dict(variant.env)}
    done = subprocess.run(  # noqa: S603 - our interpreter and script
        [sys.executable, str(WORKER), json.dumps(spec)], capture_output=True, cwd=variant.root, env=env, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"micro worker of {variant.name} failed:\n{done.stderr.decode(errors='replace')[-3000:]}")
    result = dict(json.loads(done.stdout.decode().splitlines()[-1]))
    if not Path(result["package"]).is_relative_to(variant.root):
        raise RuntimeError(f"micro worker of {variant.name} imported {result['package']}")
    return result


def traced(variants: list[Variant], sink: OtlpSink) -> list[Variant]:
    """Each variant, then the same with traces on (``<name>+traces``), exported to ``sink``."""
    out = []
    for variant in variants:
        on = (("GATEWAY_OTLP_TRACES_ENDPOINT", sink.url), ("OTEL_BSP_SCHEDULE_DELAY", "200"))
        out += [variant, Variant(f"{variant.name}+traces", variant.root, variant.env + on)]
    return out


def run(args: Any, variants: list[Variant], report: Report) -> None:
    with OtlpSink() as sink:
        if getattr(args, "traced", False):
            variants = traced(variants, sink)
        measure(args, variants, report)
        if sink.exports:
            report.add(f"Spans exported to the sink: {sink.exports} exports, {sink.bytes:,} bytes.", "")


def measure(args: Any, variants: list[Variant], report: Report) -> None:
    runs: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
    with Stack([], Path(tempfile.mkdtemp(prefix="bench-micro-"))) as stack:
        spec = {
            "triton_url": stack.triton.grpc_url,
            "repositories": [str(REFERENCE_REPOSITORY), str(TEST_REPOSITORY)],
            "prompt": prompt_text(args.prompt_bytes),
            "tokens": args.tokens,
            "requests": args.requests,
        }
        for round_ in range(args.repeat):
            for variant in variants if round_ % 2 == 0 else variants[::-1]:
                result = run_worker(variant, spec)
                runs[variant.name].append(result)
                log(
                    f"  micro {variant.name}: {result['us_per_token']:.1f} µs/token, "
                    f"{result['us_per_request']:.0f} µs/request, "
                    f"{result.get('process_us_per_request', 0):.0f} µs/request (all threads)"
                )
    first = statistics.median(r["us_per_token"] for r in runs[variants[0].name])
    table = []
    for name, results in runs.items():
        token = statistics.median(r["us_per_token"] for r in results)
        request = statistics.median(r["us_per_request"] for r in results)
        process = [r["process_us_per_request"] for r in results if "process_us_per_request" in r]
        every = fmt(statistics.median(process), 0) if process else "—"
        table.append([name, fmt(token), fmt(ratio(token, first), 2), fmt(request, 0), every])
    report.add(
        f"## The app in process: chat, {args.prompt_bytes:,} B prompt, {args.tokens}-token streams, one at a time",
        "",
        f"Event loop thread CPU, medians of {args.repeat} process(es) × {args.requests} requests.",
        "",
    )
    report.table(
        ["variant", "µs/token", "/ first", "µs per 1-token request", "process µs per request (all threads)"], table
    )
    split = [
        [name, fmt(statistics.median(r["us_per_token_reasoning"] for r in results))]
        for name, results in runs.items()
        if all("us_per_token_reasoning" in r for r in results)
    ]
    if split:
        report.add("## The same streams, all reasoning (`deepseek_r1` on the firehose model)", "")
        report.table(["variant", "µs/token"], split)
    thinking = runs[variants[0].name][0].get("reasoning_parsers_us_per_feed")
    if thinking:
        report.add(f"## Reasoning parsers inside the reasoning, 4-character pieces (`{variants[0].name}`)", "")
        report.table(["parser", "µs per feed"], [[name, fmt(us, 3)] for name, us in thinking.items()])
    streamed = runs[variants[0].name][0].get("streamed_arguments_us_per_feed")
    if streamed:
        report.add(f"## A call's string argument as it streams, 4-character pieces (`{variants[0].name}`)", "")
        report.table(["parser", "µs per feed"], [[name, fmt(us, 3)] for name, us in streamed.items()])
    layouts = runs[variants[0].name][0].get("contracts_us_per_token")
    if layouts:
        report.add(
            f"## Each backend contract: a response read and assembled, µs per token (`{variants[0].name}`)",
            "",
            "One token a response, 64 tokens of prose, in process (bench/contracts.py): the part of a "
            "token's path that differs between layouts.",
            "",
        )
        report.table(["layout", "µs per token"], [[name, fmt(us, 2)] for name, us in layouts.items()])
    parsers = runs[variants[0].name][0]["tool_parsers_us_per_feed"]
    if parsers:
        report.add(f"## Tool-call parsers on plain prose, 4-character pieces (`{variants[0].name}`)", "")
        report.table(["parser", "µs per feed"], [[name, fmt(us, 3)] for name, us in parsers.items()])
    report.data["micro"] = runs
