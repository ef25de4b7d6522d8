"""Gateway workers: tokens/s and gateway CPU per token at 1 and 2 workers, beside the floor.

Starts its own tritonserver (reference + test models), then for each worker count a gateway with
``--workers N`` and the same load as ``gateway_bench.py`` (firehose, streaming, one load client
in its own process, bench/loadgen.py). The floor (a direct gRPC client on the same model, same
concurrency) runs once per concurrency. Gateway CPU is the whole process tree (the supervisor
and its workers). Prints one table and writes JSON to --output.

On a machine with few cores Triton, the load client and the gateway share them, so tokens/s
with 2 workers is bounded by what is left; the CPU per token says what a worker costs.

Run:  .venv/bin/python bench/workers.py                  (about 2 minutes)
      .venv/bin/python bench/workers.py --workers 1,2,4 --concurrency 64,256
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BENCH,
    FIREHOSE_TOKEN,
    log,
    machine_info,
    run_and_report,
    run_load,
    start_gateway,
    start_triton,
    triton_pid,
)  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--concurrency", default="64", help="comma-separated concurrency levels")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request (firehose max_tokens)")
    parser.add_argument("--duration", type=float, default=6.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of load before the window opens")
    parser.add_argument("--output", type=Path, default=BENCH / "results" / "workers.json")
    return parser.parse_args(argv)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def spec(args: argparse.Namespace, triton: Any, target: str, concurrency: int, gateway: Any = None) -> dict[str, Any]:
    watch = {"triton": triton_pid(triton)}
    if gateway is not None:
        watch["gateway"] = gateway.pid
    return {
        "target": target,
        "concurrency": concurrency,
        "grpc_url": triton.grpc_url,
        "host": "127.0.0.1",
        "port": gateway.port if gateway is not None else 0,
        "model": "firehose",
        "prompt": "benchmark prompt",
        "max_tokens": args.tokens,
        "expect_tokens": args.tokens,
        "stream": True,
        "token_text": FIREHOSE_TOKEN,
        "warmup": args.warmup,
        "duration": args.duration,
        "watch_pids": watch,
        "watch_trees": ["triton", "gateway"],  # the supervisor and every worker
        "uvloop": True,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gw-workers-"))
    result: dict[str, Any] = {"machine": machine_info(), "load_average_before": os.getloadavg(), "levels": []}
    triton = start_triton(workdir / "tritonserver.log")
    try:
        floors = {}
        for concurrency in _ints(args.concurrency):
            floors[concurrency] = run_load(spec(args, triton, "floor", concurrency))
            log(f"floor c={concurrency}: {floors[concurrency]['tokens_per_s']:.0f} tok/s")
        for workers in _ints(args.workers):
            gateway = start_gateway(triton.grpc_url, workdir / f"gateway-{workers}.log", ["--workers", str(workers)])
            try:
                run_load({**spec(args, triton, "http", 8, gateway), "warmup": 0.0, "duration": 3.0})  # every worker up
                for concurrency in _ints(args.concurrency):
                    load = run_load(spec(args, triton, "http", concurrency, gateway))
                    floor = floors[concurrency]
                    level = {
                        "workers": workers,
                        "concurrency": concurrency,
                        "tokens_per_s": load["tokens_per_s"],
                        "floor_tokens_per_s": floor["tokens_per_s"],
                        "ratio_to_floor": load["tokens_per_s"] / floor["tokens_per_s"],
                        "gateway_cpu_us_per_token": load.get("gateway_cpu_us_per_token"),
                        "gateway_cpu_cores": (load.get("gateway_cpu_s") or 0.0) / args.duration,
                        "triton_cpu_us_per_token": load.get("triton_cpu_us_per_token"),
                        "ttft_p50_ms": load.get("ttft_p50_ms"),
                        "errors": load.get("errors"),
                        "load_average": os.getloadavg(),
                    }
                    result["levels"].append(level)
                    log(
                        f"workers={workers} c={concurrency}: {level['tokens_per_s']:.0f} tok/s "
                        f"({level['ratio_to_floor']:.2f} of the floor), gateway "
                        f"{level['gateway_cpu_us_per_token'] or 0:.1f} µs CPU/token, "
                        f"{level['gateway_cpu_cores']:.2f} cores"
                    )
            finally:
                gateway.stop()
    finally:
        triton.stop()
    return result


def print_table(result: dict[str, Any]) -> None:
    print(f"\nmachine: {result['machine'].get('cpu', '?')}, load average before: {result['load_average_before']}")
    print("workers   c   tok/s  floor tok/s  ratio  gw µs CPU/tok  gw cores  TTFT p50 ms  errors  load avg (1 min)")
    for level in result["levels"]:
        print(
            f"{level['workers']:7d} {level['concurrency']:4d} {level['tokens_per_s']:7.0f} "
            f"{level['floor_tokens_per_s']:12.0f} {level['ratio_to_floor']:6.2f} "
            f"{level['gateway_cpu_us_per_token'] or 0:14.1f} {level['gateway_cpu_cores']:9.2f} "
            f"{level['ttft_p50_ms'] or 0:12.1f} {level['errors']:7d} {level['load_average'][0]:8.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_and_report(args, run, print_table)


if __name__ == "__main__":
    raise SystemExit(main())
