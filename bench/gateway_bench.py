"""Gateway benchmark: the gateway against its floor (a direct gRPC client), in one run, same machine.

Starts its own tritonserver (reference + test models) and the gateway as a subprocess, then for
each concurrency runs the *floor* (``tritonclient.grpc.aio`` streaming straight from the firehose
model) and the *gateway* (SSE over HTTP through the gateway, same model, same N) with the same
load-client design (see bench/loadgen.py), each client in its own process. Prints a table of floor,
gateway and gateway/floor for every metric, writes JSON (and a Markdown copy) to --output.

Also: streaming vs non-streaming requests/s on the same backend work, gateway memory per open idle
stream, the tiny LM end to end, and optionally a py-spy profile of the gateway under load.

Run:  .venv/bin/python bench/gateway_bench.py            (about 6 minutes)
      .venv/bin/python bench/gateway_bench.py --quick    (about 2 minutes)
      .venv/bin/python bench/gateway_bench.py --transport h2,aio   (+ the main levels on grpc.aio)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BENCH,
    FIREHOSE_TOKEN,
    exit_on_sigterm,
    firehose_spec,
    fmt,
    idle_stream_memory,
    log,
    machine_info,
    run_load,
    start_gateway,
    start_triton,
)

METRICS = [
    # key, label, higher is better
    ("tokens_per_s", "tokens/s", True),
    ("requests_per_s", "requests/s", True),
    ("ttft_p50_ms", "TTFT p50 ms", False),
    ("ttft_p99_ms", "TTFT p99 ms", False),
    ("gap_p50_ms", "gap p50 ms", False),
    ("gap_p99_ms", "gap p99 ms", False),
    ("errors", "errors", False),
    ("gateway_cpu_us_per_token", "gw CPU µs/token", False),
    ("gateway_rss_mb_peak", "gw RSS MB", False),
    ("client_cpu_us_per_token", "client CPU µs/token", False),
    ("triton_cpu_us_per_token", "Triton+stubs CPU µs/token", False),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark the gateway against a direct tritonclient.grpc.aio client (the floor) "
        "on the firehose test model, in one run. Starts its own tritonserver and gateway.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--concurrency", default="1,16,64,256", help="comma-separated concurrency levels")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request (firehose max_tokens N)")
    parser.add_argument("--duration", type=float, default=8.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of load before the window opens")
    parser.add_argument(
        "--repeat", type=int, default=1, help="floor/gateway pairs per level (order alternates); medians are reported"
    )
    parser.add_argument("--output", type=Path, default=BENCH / "results" / "latest.json", help="JSON result path")
    parser.add_argument("--quick", action="store_true", help="short smoke run: 3 s windows, 1 s warm-up, fewer extras")
    parser.add_argument(
        "--stream-compare-concurrency",
        type=int,
        default=16,
        help="concurrency of the streaming vs non-streaming comparison (0: skip)",
    )
    parser.add_argument(
        "--idle-streams", type=int, default=256, help="open idle streams for the memory figure (0: skip)"
    )
    parser.add_argument(
        "--tiny-llm", default="1,4,16", help="concurrency levels for the tiny LM end to end ('' to skip)"
    )
    parser.add_argument("--tiny-llm-tokens", type=int, default=64, help="tokens per tiny-LM request")
    parser.add_argument(
        "--profile", action="store_true", help="also record py-spy profiles of the gateway at concurrency 16 and 64"
    )
    parser.add_argument("--profile-concurrency", default="16,64")
    parser.add_argument(
        "--gateway-arg",
        action="append",
        default=[],
        help="extra gateway CLI argument (repeatable), e.g. --gateway-arg=--max-concurrent-requests=0",
    )
    parser.add_argument("--no-uvloop-client", action="store_true", help="HTTP load client on the default asyncio loop")
    parser.add_argument(
        "--transport",
        default=os.environ.get("GATEWAY_TRITON_TRANSPORT", "h2"),
        help="what carries the gateway's token streams to Triton (h2 or aio); comma-separated for several: "
        "every section runs on the first, the main levels again on each other one (a fresh gateway each)",
    )
    args = parser.parse_args(argv)
    args.transports = [t.strip() for t in args.transport.split(",") if t.strip()]
    if not args.transports or any(t not in ("h2", "aio") for t in args.transports):
        parser.error(f"--transport takes h2 and/or aio, not {args.transport!r}")
    args.output = args.output.resolve()
    if args.quick:
        args.duration, args.warmup = 3.0, 1.0
        args.idle_streams = min(args.idle_streams, 128)
        args.tiny_llm = "1,8" if args.tiny_llm else ""
    return args


def _levels(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def median_result(runs: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key in runs[0]:
        values = [r.get(key) for r in runs]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            merged[key] = statistics.median(values)
        else:
            merged[key] = values[0] if len(values) == 1 else values
    merged["errors"] = sum(r.get("errors", 0) for r in runs)
    return merged


def ratio(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return None
    return a / b


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = Path(tempfile.mkdtemp(prefix="gw-bench-"))
        self.triton: Any = None
        self.gateway: Any = None

    def base_spec(self, **extra: Any) -> dict[str, Any]:
        args = self.args
        defaults = {
            "prompt": "benchmark prompt",
            "max_tokens": args.tokens,
            "expect_tokens": args.tokens,
            "uvloop": not args.no_uvloop_client,
            "warmup": args.warmup,
            "duration": args.duration,
        }
        return firehose_spec(self.triton, self.gateway, **{**defaults, **extra})

    def pair(self, concurrency: int, **extra: Any) -> dict[str, Any]:
        """Floor and gateway at one concurrency, --repeat times with alternating order."""
        runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        # At high concurrency one request lasts c*N/throughput seconds: stretch warm-up to about one
        # such cycle and the window to about two, so the window sees steady state, not the ramp.
        tokens = extra.get("max_tokens", self.args.tokens)
        extra.setdefault("warmup", max(self.args.warmup, concurrency * tokens / 3000))
        extra.setdefault("duration", max(self.args.duration, concurrency * tokens / 1500))
        for rep in range(self.args.repeat):
            order = ("floor", "http") if rep % 2 == 0 else ("http", "floor")
            for target in order:
                result = run_load(self.base_spec(target=target, concurrency=concurrency, **extra))
                runs[target].append(result)
                log(
                    f"  c={concurrency} {target:5s} {result['tokens_per_s']:8.0f} tok/s "
                    f"ttft p50 {fmt(result['ttft_p50_ms'])} ms errors {result['errors']}"
                )
        floor, gateway = median_result(runs["floor"]), median_result(runs["http"])
        return {
            "concurrency": concurrency,
            "floor": floor,
            "gateway": gateway,
            "ratio": {key: ratio(gateway.get(key), floor.get(key)) for key, _, _ in METRICS},
            "runs": runs,
        }

    # ------------------------------------------------------------------ sections
    def main_levels(self) -> list[dict[str, Any]]:
        levels = []
        for concurrency in _levels(self.args.concurrency):
            log(f"level c={concurrency}")
            levels.append(self.pair(concurrency))
        return levels

    def stream_compare(self) -> dict[str, Any] | None:
        concurrency = self.args.stream_compare_concurrency
        if not concurrency:
            return None
        n = self.args.tokens
        # Same backend work both ways: the scripted model replays N one-token responses even for a
        # non-streaming request, so Triton does identical work and only the gateway's output differs.
        script = json.dumps({"responses": [{"utf8": [FIREHOSE_TOKEN]}] * n, "replay_when_not_streaming": True})
        out: dict[str, Any] = {"concurrency": concurrency, "tokens": n}
        for label, model, prompt in (
            ("scripted_replay", "scripted", script),
            ("firehose", "firehose", "benchmark prompt"),
        ):
            section: dict[str, Any] = {}
            for stream in (True, False):
                spec = dict(model=model, prompt=prompt, stream=stream, concurrency=concurrency)
                for target in ("http", "floor"):
                    result = run_load(self.base_spec(target=target, **spec))
                    section[f"{'gateway' if target == 'http' else 'floor'}_{'stream' if stream else 'nonstream'}"] = (
                        result
                    )
                    log(
                        f"  {label} {target} stream={stream}: {result['requests_per_s']:.1f} req/s"
                        f" errors {result['errors']}"
                    )
            section["gateway_stream_over_nonstream_rps"] = ratio(
                section["gateway_stream"]["requests_per_s"], section["gateway_nonstream"]["requests_per_s"]
            )
            section["floor_stream_over_nonstream_rps"] = ratio(
                section["floor_stream"]["requests_per_s"], section["floor_nonstream"]["requests_per_s"]
            )
            out[label] = section
        return out

    def tiny_llm(self) -> list[dict[str, Any]]:
        levels = []
        for concurrency in _levels(self.args.tiny_llm):
            log(f"tiny-llm c={concurrency}")
            extra = {
                "model": "tiny-llm",
                "prompt": "Once upon a time",
                "max_tokens": self.args.tiny_llm_tokens,
                "expect_tokens": self.args.tiny_llm_tokens,
                "token_text": "",  # random text: count by reported usage / num_output_tokens
                "sampling": {"ignore_eos": True, "seed": 1},
                "extra": {"ignore_eos": True, "seed": 1},
                "warmup": max(self.args.warmup, 2.0),
                "duration": max(self.args.duration, 6.0),
            }
            levels.append(self.pair(concurrency, **extra))
        return levels

    def profile(self) -> dict[str, Any]:
        from profile_summary import summarize

        results = {}
        pyspy = Path(sys.executable).parent / "py-spy"
        for concurrency in _levels(self.args.profile_concurrency):
            raw = self.args.output.parent / f"profile-c{concurrency}.txt"
            seconds = int(self.args.warmup + self.args.duration)
            log(f"profile c={concurrency} ({seconds}s of py-spy)")
            command = [
                str(pyspy),
                "record",
                "--pid",
                str(self.gateway.pid),
                "--duration",
                str(seconds),
                "--rate",
                "250",
                "--function",
                "--nonblocking",
                "--format",
                "raw",
                "--output",
                str(raw),
            ]
            spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # noqa: S603
            time.sleep(0.5)
            load = run_load(self.base_spec(target="http", concurrency=concurrency, warmup=0.5, duration=seconds - 1))
            spy.wait(timeout=seconds + 30)
            summary = summarize(raw.read_text(), top=15)
            summary["tokens"] = load["tokens_total"]
            summary["tokens_per_s"] = load["tokens_per_s"]
            summary["gateway_cpu_us_per_token"] = load.get("gateway_cpu_us_per_token")
            summary["raw"] = str(raw)
            results[str(concurrency)] = summary
        return results

    def start_gateway(self, transport: str) -> None:
        """A gateway on ``transport``. Through the environment, which every gateway the bench
        starts inherits (the idle-stream one too)."""
        os.environ["GATEWAY_TRITON_TRANSPORT"] = transport
        log(f"starting the gateway (transport {transport})")
        self.gateway = start_gateway(
            self.triton.grpc_url, self.workdir / f"gateway-{transport}.log", self.args.gateway_arg
        )
        log(f"gateway pid {self.gateway.pid} on {self.gateway.url}; warm-up")
        run_load(self.base_spec(target="http", concurrency=4, warmup=0.0, duration=1.0))

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, Any]:
        args = self.args
        started = time.time()
        result: dict[str, Any] = {
            "command": " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/gateway_bench.py", *sys.argv[1:]]),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine_info(),
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        }
        log("starting tritonserver")
        self.triton = start_triton(self.workdir / "tritonserver.log")
        try:
            log(f"triton ready on {self.triton.grpc_url}")
            self.start_gateway(args.transports[0])
            run_load(self.base_spec(target="floor", concurrency=4, warmup=0.0, duration=1.0))
            result["gateway_rss_mb_idle"] = (self.gateway.rss_bytes() or 0) / 2**20
            result["levels"] = self.main_levels()
            log("streaming vs non-streaming")
            result["stream_vs_nonstream"] = self.stream_compare()
            if args.idle_streams:
                log(f"idle streams: {args.idle_streams}")
                result["idle_streams"] = idle_stream_memory(self.triton.grpc_url, self.workdir, args.idle_streams)
            if args.tiny_llm:
                result["tiny_llm"] = self.tiny_llm()
            if args.profile:
                result["profile"] = self.profile()
            result["gateway_log_tail"] = self.gateway.log_file.read_text(errors="replace")[-2000:]
            result["other_transports"] = {}
            for transport in args.transports[1:]:
                self.gateway.stop()
                self.gateway = None
                self.start_gateway(transport)
                result["other_transports"][transport] = {"levels": self.main_levels()}
        finally:
            if self.gateway is not None:
                self.gateway.stop()
            self.triton.stop()
        result["elapsed_s"] = time.time() - started
        result["targets"] = targets(result)
        return result


# --------------------------------------------------------------------------- targets and tables


def _level(result: dict[str, Any], concurrency: int) -> dict[str, Any] | None:
    return next((lv for lv in result.get("levels", []) if lv["concurrency"] == concurrency), None)


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []

    def add(name: str, value: float | None, bar: str, met: bool | None) -> None:
        out.append({"target": name, "value": value, "bar": bar, "met": met})

    for concurrency in (16, 64):
        level = _level(result, concurrency)
        if level:
            value = level["ratio"]["tokens_per_s"]
            add(f"tokens/s gateway/floor at c={concurrency}", value, ">= 0.90", value is not None and value >= 0.9)
    cpus = [lv["gateway"].get("gateway_cpu_us_per_token") for lv in result.get("levels", []) if lv["concurrency"] >= 16]
    cpus = [c for c in cpus if c is not None]
    if cpus:
        worst = max(cpus)
        add("gateway CPU µs per token (worst of c>=16)", worst, "<= 100", worst <= 100)
    level = _level(result, 1)
    if level and level["gateway"].get("ttft_p50_ms") is not None and level["floor"].get("ttft_p50_ms") is not None:
        added = level["gateway"]["ttft_p50_ms"] - level["floor"]["ttft_p50_ms"]
        add("added TTFT p50 at c=1 (ms)", added, "<= 2.0", added <= 2.0)
    compare = result.get("stream_vs_nonstream")
    if compare:
        value = compare["scripted_replay"]["gateway_stream_over_nonstream_rps"]
        add(
            f"streaming req/s / non-streaming req/s, same backend work, c={compare['concurrency']}",
            value,
            ">= 0.90",
            value is not None and value >= 0.9,
        )
    idle = result.get("idle_streams")
    if idle:
        add(
            f"memory per open idle stream (KB, {idle['count']} streams)",
            idle["kb_per_stream"],
            "<= 64",
            idle["kb_per_stream"] <= 64,
        )
    return out


def level_table(levels: list[dict[str, Any]], title: str) -> list[str]:
    lines = [f"### {title}", "", "| c | metric | floor | gateway | gateway/floor |", "|---:|---|---:|---:|---:|"]
    for level in levels:
        for key, label, _ in METRICS:
            f, g, r = level["floor"].get(key), level["gateway"].get(key), level["ratio"].get(key)
            if f is None and g is None:
                continue
            if key.startswith("gateway_"):
                f, r = None, None  # the floor does not go through the gateway
            lines.append(f"| {level['concurrency']} | {label} | {fmt(f)} | {fmt(g)} | {fmt(r, 2)} |")
    return lines


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        f"Run {result['started']}, {result['elapsed_s']:.0f} s. Machine: {m['cpu']}, {m['cores']} cores, "
        f"Linux {m['kernel']}, Python {m['python']}, load average at start {m['loadavg_at_start'][0]:.2f}.",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Firehose, {result['config']['tokens']} tokens per request, {result['config']['duration']} s window "
        f"after {result['config']['warmup']} s warm-up, medians of {result['config']['repeat']} run(s) per cell. "
        f"Gateway RSS idle after warm-up: {result.get('gateway_rss_mb_idle', 0):.1f} MB. "
        f"Token streams to Triton on the {result['config']['transports'][0]} transport.",
        "",
    ]
    lines += level_table(result["levels"], "Floor (direct gRPC) vs gateway (SSE over HTTP)")
    lines.append("")
    for transport, other in result.get("other_transports", {}).items():
        lines += level_table(other["levels"], f"Floor vs gateway on the {transport} transport (fresh gateway)")
        lines.append("")
    lines += ["### Targets", "", "| target | value | bar | met |", "|---|---:|---:|---|"]
    for t in result["targets"]:
        lines.append(f"| {t['target']} | {fmt(t['value'], 2)} | {t['bar']} | {'yes' if t['met'] else 'NO'} |")
    compare = result.get("stream_vs_nonstream")
    if compare:
        lines += [
            "",
            f"### Streaming vs non-streaming, c={compare['concurrency']}, {compare['tokens']} tokens",
            "",
            "| work | client | stream req/s | non-stream req/s | stream/non-stream |",
            "|---|---|---:|---:|---:|",
        ]
        for label in ("scripted_replay", "firehose"):
            section = compare[label]
            for who in ("gateway", "floor"):
                s, n = section[f"{who}_stream"]["requests_per_s"], section[f"{who}_nonstream"]["requests_per_s"]
                lines.append(f"| {label} | {who} | {fmt(s)} | {fmt(n)} | {fmt(ratio(s, n), 2)} |")
    idle = result.get("idle_streams")
    if idle:
        cold, warm = idle["rounds"]
        lines += [
            "",
            "### Idle streams",
            "",
            f"Fresh gateway process, {cold['streams_open']} open idle streams (scripted model: one token, "
            f"then silence; {cold['failures']} failed to open; opening all took {cold['open_all_s']:.1f} s). "
            f"Cold (first time): RSS {cold['rss_before_mb']:.1f} → {cold['rss_open_mb']:.1f} MB = "
            f"**{cold['kb_per_stream']:.1f} KB per stream**; {cold['rss_after_close_mb']:.1f} MB after closing. "
            f"Warm (same again): {warm['kb_per_stream']:.1f} KB per stream, {warm['rss_after_close_mb']:.1f} MB "
            f"after closing. Gateway CPU while they idle: {cold['idle_cpu_s_per_s'] * 100:.1f} % of a core.",
        ]
    if result.get("tiny_llm"):
        lines.append("")
        lines += level_table(
            result["tiny_llm"], f"tiny-llm end to end ({result['config']['tiny_llm_tokens']} tokens, ignore_eos)"
        )
    if result.get("profile"):
        lines += ["", "### Profile (py-spy, gateway process)", ""]
        for concurrency, summary in result["profile"].items():
            lines.append(
                f"c={concurrency}: {summary['samples']} samples of busy threads; "
                f"{fmt(summary.get('gateway_cpu_us_per_token'))} µs gateway CPU per token"
            )
            lines += ["", "| self share | layer |", "|---:|---|"]
            for row in summary["layers"][:10]:
                lines.append(f"| {row['share'] * 100:.1f} % | {row['layer']} |")
            lines += ["", "| inclusive share | function |", "|---:|---|"]
            for row in summary["gateway_inclusive"][:12]:
                lines.append(f"| {row['share'] * 100:.1f} % | `{row['frame']}` |")
            lines += ["", "| self share | function |", "|---:|---|"]
            for row in summary["self"][:12]:
                lines.append(f"| {row['share'] * 100:.1f} % | `{row['frame']}` |")
            lines.append("")
    return "\n".join(lines) + "\n"


def print_table(result: dict[str, Any]) -> None:
    transports = result["config"]["transports"]
    print_levels(result["levels"], transports[0])
    for transport, other in result.get("other_transports", {}).items():
        print_levels(other["levels"], transport)
    print("Targets:")
    for t in result["targets"]:
        print(f"  [{'met' if t['met'] else 'MISSED'}] {t['target']}: {fmt(t['value'], 2)} (bar {t['bar']})")
    print()


def print_levels(levels: list[dict[str, Any]], transport: str) -> None:
    print(f"\ntransport {transport}")
    header = f"{'c':>4} {'metric':<22} {'floor':>10} {'gateway':>10} {'gw/floor':>9}"
    print(header)
    print("-" * len(header))
    for level in levels:
        for key, label, _ in METRICS:
            f, g, r = level["floor"].get(key), level["gateway"].get(key), level["ratio"].get(key)
            if key.startswith("gateway_"):
                f, r = None, None
            if f is None and g is None:
                continue
            print(f"{level['concurrency']:>4} {label:<22} {fmt(f):>10} {fmt(g):>10} {fmt(r, 2):>9}")
        print()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    exit_on_sigterm()
    result = Bench(args).run()
    args.output.write_text(json.dumps(result, indent=1, default=str))
    args.output.with_suffix(".md").write_text(markdown(result))
    print_table(result)
    print(f"JSON: {args.output}\nMarkdown: {args.output.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
