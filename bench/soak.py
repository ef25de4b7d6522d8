"""``soak``: many concurrent streams for a bounded time, every stream checked.

Each variant's gateway (``--max-concurrent-requests=0``, so admission never queues) holds
``--streams`` streams back to back for ``--duration`` seconds on the firehose. Every stream must
be exactly ``"tok " * N`` (no loss, duplication or interleaving), end with finish_reason
``length``, ``usage.completion_tokens == N`` and ``[DONE]``; anything else is an error. Then:
gateway RSS at the start, its peak and after the load, and whether any request is still counted
as running (a leak of in-flight state).
"""

from __future__ import annotations

import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.load import run_client, warm
from bench.procstat import rss_bytes
from bench.report import Report, fmt
from bench.scenarios import FIREHOSE_TOKEN
from bench.stack import Stack, Variant, log, triton_pid


def metric(url: str, name: str) -> float | None:
    """A Prometheus series summed over its labels."""
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:  # noqa: S310 - loopback
            text = reply.read().decode()
    except OSError:
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith((name + "{", name + " "))]
    return sum(values) if values else None


def run(args: Any, variants: list[Variant], report: Report) -> int:
    gateway_args = ("--max-concurrent-requests=0", *args.gateway_arg)
    table, results = [], {}
    with Stack(variants, Path(tempfile.mkdtemp(prefix="bench-soak-")), gateway_args) as stack:
        warm(stack)
        for name, gateway in stack.gateways.items():
            time.sleep(1.0)
            rss_start = (rss_bytes(gateway.pid) or 0) / 2**20
            log(f"soak {name}: {args.streams} streams for {args.duration:.0f} s, RSS {rss_start:.1f} MB")
            spec = {
                "target": "http",
                "host": "127.0.0.1",
                "port": gateway.port,
                "model": "firehose",
                "path": "/v1/completions",
                "prompt": "soak",
                "max_tokens": args.tokens,
                "expect_tokens": args.tokens,
                "expect_finish": "length",
                "stream": True,
                "token_text": FIREHOSE_TOKEN,
                "check_content": True,
                "concurrency": args.streams,
                "warmup": 0.0,
                "duration": args.duration,
                "drain_timeout": 120.0,
                "timeline": 1.0,  # a point a second, for the plot over time
                "watch": {"gateway": gateway.pid, "triton": triton_pid(stack.triton)},
            }
            load = run_client(spec)
            time.sleep(2.0)
            load["rss_start_mb"] = rss_start
            load["rss_end_mb"] = (rss_bytes(gateway.pid) or 0) / 2**20
            load["running_after"] = metric(gateway.url + "/metrics", "gateway_requests_running")
            results[name] = load
            table.append(
                [
                    name,
                    str(load["requests_ok"]),
                    str(load["errors"]),
                    str(load["unfinished"]),
                    fmt(load["tokens_per_s"]),
                    fmt(load.get("gateway_cpu_us_per_token")),
                    f"{rss_start:.1f} / {fmt(load.get('gateway_rss_mb_peak'))} / {load['rss_end_mb']:.1f}",
                    fmt(load["running_after"], 0),
                ]
            )
            for sample in load["error_samples"]:
                log(f"  error: {sample}")
    report.add(f"## {args.streams} streams of {args.tokens} tokens for {args.duration:.0f} s, every stream checked", "")
    header = ["variant", "streams checked", "errors", "unfinished", "tokens/s", "gateway CPU µs/token"]
    report.table([*header, "RSS start / peak / end MB", "running after"], table)
    report.data["soak"] = results
    report.data["soak_run"] = {"streams": args.streams, "tokens": args.tokens, "duration_s": args.duration}
    return (
        0 if all(r["errors"] == 0 and not r["unfinished"] and not r["running_after"] for r in results.values()) else 1
    )
