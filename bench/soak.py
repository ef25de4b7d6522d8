"""Soak: many concurrent streams against the firehose model for a bounded time (issue 4, "Load").

Starts its own tritonserver and gateway (``--max-concurrent-requests 0`` so admission never queues),
then keeps ``--streams`` streams open back to back for ``--duration`` seconds with the same minimal
HTTP client as the benchmark (bench/loadgen.py, its own process). Every stream is checked: status
200, content exactly ``"tok " * N`` (no loss, no duplication, no interleaving), finish_reason
"length", usage.completion_tokens == N, ``[DONE]`` last. Reports errors, completed and corrupted
counts, gateway RSS at start / peak / end and RSS per open stream, then the idle-stream memory
figure at the same count (scripted model, one token then silence).

    .venv/bin/python bench/soak.py                 # 500 streams, 60 s
    .venv/bin/python bench/soak.py --streams 100 --duration 10
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BENCH,
    FIREHOSE_TOKEN,
    exit_on_sigterm,
    idle_stream_memory,
    log,
    machine_info,
    run_load,
    start_gateway,
    start_triton,
    triton_pid,
)


def metric(url: str, name: str) -> float | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:  # noqa: S310 - loopback
            text = reply.read().decode()
    except OSError:
        return None
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return total if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=500, help="concurrent streams")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (new streams stop after it)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per stream")
    parser.add_argument(
        "--idle",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure memory per open idle stream at the same count",
    )
    parser.add_argument(
        "--idle-rounds",
        type=int,
        default=1,
        help="warm rounds of idle streams after the cold one (growth that goes on is a leak)",
    )
    parser.add_argument("--output", type=Path, default=BENCH / "results" / "soak.json")
    parser.add_argument("--gateway-arg", action="append", default=["--max-concurrent-requests=0"])
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    exit_on_sigterm()
    workdir = Path(tempfile.mkdtemp(prefix="gw-soak-"))
    result: dict = {
        "command": "bench/soak.py " + " ".join(sys.argv[1:]),
        "machine": machine_info(),
        "config": {k: str(v) for k, v in vars(args).items()},
    }
    triton = start_triton(workdir / "tritonserver.log")
    gateway = None
    try:
        gateway = start_gateway(triton.grpc_url, workdir / "gateway.log", args.gateway_arg)
        spec = {
            "target": "http",
            "grpc_url": triton.grpc_url,
            "host": "127.0.0.1",
            "port": gateway.port,
            "model": "firehose",
            "prompt": "soak",
            "max_tokens": args.tokens,
            "expect_tokens": args.tokens,
            "expect_finish": "length",
            "stream": True,
            "token_text": FIREHOSE_TOKEN,
            "check_content": True,
            "watch_pids": {"gateway": gateway.pid, "triton": triton_pid(triton)},
        }
        run_load({**spec, "concurrency": 8, "warmup": 0.0, "duration": 1.0})  # warm-up
        time.sleep(1.0)
        rss_start = (gateway.rss_bytes() or 0) / 2**20
        log(f"soak: {args.streams} streams x {args.duration:.0f} s, gateway RSS {rss_start:.1f} MB")
        started = time.monotonic()
        load = run_load(
            {**spec, "concurrency": args.streams, "warmup": 0.0, "duration": args.duration, "drain_timeout": 120.0}
        )
        elapsed = time.monotonic() - started
        time.sleep(2.0)
        rss_end = (gateway.rss_bytes() or 0) / 2**20
        gateway_metrics = gateway.url + "/metrics"
        result["soak"] = {
            "streams": args.streams,
            "elapsed_s": elapsed,
            "requests_started": load["requests_total"],
            "completed_ok": load["requests_ok"] - 0,
            "errors": load["errors"],
            "error_samples": load["error_samples"],
            "unfinished": load["unfinished"],
            "tokens_per_s": load["tokens_per_s"],
            "ttft_p50_ms": load["ttft_p50_ms"],
            "ttft_p99_ms": load["ttft_p99_ms"],
            "gap_p50_ms": load["gap_p50_ms"],
            "gap_p99_ms": load["gap_p99_ms"],
            "gateway_cpu_us_per_token": load.get("gateway_cpu_us_per_token"),
            "client_cpu_us_per_token": load.get("client_cpu_us_per_token"),
            "rss_start_mb": rss_start,
            "rss_peak_mb": load.get("gateway_rss_mb_peak"),
            "rss_end_mb": rss_end,
            "kb_per_open_stream": ((load.get("gateway_rss_mb_peak") or rss_start) - rss_start) * 1024 / args.streams,
            "gateway_requests_running_after": metric(gateway_metrics, "gateway_requests_running"),
            "firehose_in_flight_after": metric(triton.metrics_url, "firehose_requests_in_flight"),
        }
        log(json.dumps(result["soak"]))
        if args.idle:
            log(f"idle streams: {args.streams} (fresh gateway)")
            result["idle_streams"] = idle_stream_memory(
                triton.grpc_url, workdir, args.streams, warm_rounds=args.idle_rounds
            )
            log(json.dumps(result["idle_streams"]["rounds"]))
        result["gateway_log_tail"] = gateway.log_file.read_text(errors="replace")[-3000:]
    finally:
        if gateway is not None:
            gateway.stop()
        triton.stop()
    args.output.write_text(json.dumps(result, indent=1, default=str))
    soak = result.get("soak", {})
    print(
        f"\nsoak: {soak.get('streams')} streams for {args.duration:.0f} s: {soak.get('completed_ok')} completed "
        f"and checked, {soak.get('errors')} errors (corrupted/incomplete included), {soak.get('unfinished')} unfinished"
    )
    print(
        f"gateway RSS: start {soak.get('rss_start_mb', 0):.1f} MB, peak {soak.get('rss_peak_mb') or 0:.1f} MB, "
        f"end {soak.get('rss_end_mb', 0):.1f} MB; {soak.get('kb_per_open_stream', 0):.1f} KB per open (active) stream"
    )
    if "idle_streams" in result:
        cold, *warm = result["idle_streams"]["rounds"]
        print(
            f"idle (fresh gateway): {cold['streams_open']} open idle streams ({cold['failures']} failed): "
            f"{cold['kb_per_stream']:.1f} KB per stream cold, warm rounds "
            + ", ".join(f"{w['kb_per_stream']:.1f}" for w in warm)
            + " KB; "
            f"RSS {cold['rss_before_mb']:.1f} -> {cold['rss_open_mb']:.1f} MB, "
            + ", ".join(f"{w['rss_after_close_mb']:.1f}" for w in warm)
            + " MB after closing each warm round"
        )
    print(f"JSON: {args.output}")
    return 0 if soak.get("errors") == 0 and not soak.get("unfinished") else 1


if __name__ == "__main__":
    raise SystemExit(main())
