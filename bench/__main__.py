"""``python -m bench <subcommand>``: one command for every benchmark of the gateway.

Subcommands (each starts its own tritonserver and gateways, and stops them whatever happens):

* ``load``: the scenarios (``bench/scenarios.py``) against the floor and every variant.
* ``prompts``: added TTFT by prompt size, and a paced stream while large prompts arrive.
* ``soak``: many streams for a bounded time, every stream checked, memory before and after.
* ``micro``: the app's per-token CPU in one process, and the tool-call parsers' cost per feed.
* ``agents``: a coding agent's large bodies (tools, system prompt), µs per request in process.
* ``embeddings``: inputs/s through ``/v1/embeddings`` at several batch sizes, against the floor.
* ``fairness``: a quiet key's and a critical request's TTFT under another key's flood, fair
  scheduling against fifo; the scheduler's µs per request in process.
* ``batch``: interactive chat's TTFT alone and while a large batch runs; the batch's throughput
  on the capacity it is left, against plain requests at its concurrency.
* ``replicas``: one gateway over three tritonservers: streams while replicas are killed and
  drained (migration), a slow replica's share of the work, the prefix-cache hit rate.

``--variant NAME=TREE_PATH[:ENV=VAL,...]`` (repeatable) names the gateways to compare; the
default is the repository itself, ``this``.
"""

from __future__ import annotations

import argparse
import sys

from bench import plots
from bench.report import Report
from bench.scenarios import SCENARIOS, scenario
from bench.stack import THIS, Variant, exit_on_signals, log

MICRO_ROUNDS = 10
"""``micro``'s default rounds, even (ABBA): on the shared 2-core VM, intervals of about ±5-10 % per
request and ±10-20 % per token in ~3.5 min; ±5 % per token would take ~100 rounds, which is what
the instruction counts (1 %, ~1.5 min) are for."""


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    commands = top.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name, help=text, description=text, formatter_class=argparse.ArgumentDefaultsHelpFormatter
        )
        sub.add_argument(
            "--variant",
            action="append",
            type=Variant.parse,
            default=[],
            metavar="NAME=TREE[:ENV=VAL,...]",
            help="a gateway to measure: that tree's package with that environment (repeatable; default this=<repo>)",
        )
        sub.add_argument("--repeat", type=int, default=1, help="rounds; each side's figures are medians over them")
        sub.add_argument("--gateway-arg", action="append", default=[], help="an extra flag for every gateway")
        return sub

    names = ", ".join(s.name for s in SCENARIOS)
    load = command("load", "the scenarios against the floor and every variant, alternated in one run")
    load.add_argument("--scenario", default="chat", help=f"comma-separated, of: {names}")
    load.add_argument("--concurrency", type=ints, default=None, help="levels, e.g. 1,16,64 (default: the scenario's)")
    load.add_argument("--duration", type=float, default=8.0, help="measured seconds per run")
    load.add_argument("--warmup", type=float, default=2.0, help="seconds of load before the window opens")

    prompts = command("prompts", "added TTFT by prompt size, and a paced stream's gaps while large prompts arrive")
    prompts.add_argument("--sections", default="sweep,stall", help="sweep, stall or both")
    prompts.add_argument("--sizes", default="100,10000,100000", help="prompt sizes of the sweep, in bytes")
    prompts.add_argument("--tokens", type=int, default=16, help="tokens per request in the sweep")
    prompts.add_argument("--duration", type=float, default=5.0, help="measured seconds per run")
    prompts.add_argument("--warmup", type=float, default=1.0, help="seconds of load before the window opens")

    soak = command("soak", "many concurrent streams for a bounded time, every stream checked")
    soak.add_argument("--streams", type=int, default=500, help="concurrent streams")
    soak.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    soak.add_argument("--tokens", type=int, default=64, help="tokens per stream")

    micro = command(
        "micro",
        "the app's per-token CPU in one process, the working tree against a commit; each feature's added cost; "
        "instructions under valgrind; the parsers' µs per feed",
    )
    micro.set_defaults(repeat=MICRO_ROUNDS)
    micro.add_argument(
        "--against",
        default=None,
        metavar="REF",
        help="compare the working tree (change) with this commit-ish (base, checked out in a temporary worktree); "
        "without --variant the default is the merge base of HEAD and its upstream (else main)",
    )
    micro.add_argument("--tokens", type=int, default=200, help="tokens per request")
    micro.add_argument(
        "--requests", type=int, default=10, help="requests of each kind per process (and as many of 1 token)"
    )
    micro.add_argument("--prompt-bytes", type=int, default=10_000, help="prompt size")
    micro.add_argument(
        "--features",
        default="",
        help="comma-separated kinds of request to measure beside plain (default: all of "
        "reasoning, tools, logprobs, stop, usage, keyed)",
    )
    micro.add_argument(
        "--instructions",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="count instructions under valgrind (default: when valgrind, a C compiler and callgrind.h are there)",
    )
    micro.add_argument("--instruction-tokens", type=int, default=40, help="tokens per long request when counting")
    micro.add_argument("--instruction-requests", type=int, default=2, help="requests of each kind when counting")
    micro.add_argument(
        "--instruction-delay", type=float, default=0.02, help="seconds between tokens when counting (pacing)"
    )
    micro.add_argument(
        "--traced",
        action="store_true",
        help="also each variant with OpenTelemetry traces on, exported to a sink (the cost of tracing)",
    )
    agents = command(
        "agents", "a coding agent's large request bodies (16 tools, 20 KB system prompt): µs per request in process"
    )
    agents.add_argument("--requests", type=int, default=40, help="requests of each body per process")
    agents.add_argument(
        "--profile",
        type=int,
        default=300,
        help="requests of each API's body with tools, and as many without, to profile (0: none)",
    )
    agents.add_argument(
        "--tool-parser", default=None, help="the model's tool-call parser (e.g. qwen3_coder; default: its own)"
    )
    embeddings = command("embeddings", "inputs/s through /v1/embeddings by batch size, against the direct gRPC floor")
    embeddings.add_argument("--batches", default="1,16,128", help="inputs per request, comma-separated")
    embeddings.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    embeddings.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    embeddings.add_argument("--warmup", type=float, default=2.0, help="seconds of load before the window opens")
    fairness = command(
        "fairness",
        "a quiet key's and a critical request's TTFT under another key's flood, on a fair and a fifo gateway; "
        "the scheduler's cost per request in process",
    )
    fairness.add_argument("--slots", type=int, default=4, help="GATEWAY_MAX_CONCURRENT_REQUESTS of both gateways")
    fairness.add_argument("--queue", type=int, default=16, help="GATEWAY_MAX_QUEUE_SIZE of both gateways")
    fairness.add_argument("--headroom", type=float, default=0.1, help="GATEWAY_SCHEDULING_HEADROOM of both gateways")
    fairness.add_argument("--tokens", type=int, default=8, help="tokens per request (the paced model's script)")
    fairness.add_argument("--delay", type=float, default=0.04, help="seconds between the paced model's tokens")
    fairness.add_argument("--flood", type=float, default=10.0, help="A's arrival rate, in multiples of capacity")
    fairness.add_argument("--share", type=float, default=0.1, help="B's arrival rate, as a fraction of capacity")
    fairness.add_argument("--c-rate", type=float, default=1.0, help="C's (critical) arrivals per second")
    fairness.add_argument("--duration", type=float, default=20.0, help="measured seconds per phase and gateway")
    fairness.add_argument("--warmup", type=float, default=2.0, help="seconds of the flood before the window opens")
    fairness.add_argument("--drain", type=float, default=15.0, help="seconds for a phase's last requests to end")
    fairness.add_argument(
        "--phases", action=argparse.BooleanOptionalAction, default=True, help="run the servers' phases"
    )
    fairness.add_argument(
        "--micro", action=argparse.BooleanOptionalAction, default=True, help="measure the scheduler in process"
    )
    fairness.add_argument("--micro-waiting", type=ints, default=[0, 64, 1024], help="queue lengths (0: fast path)")
    fairness.add_argument("--micro-flows", type=ints, default=[2, 64], help="flows the waiters come from")
    fairness.add_argument("--micro-requests", type=int, default=2000, help="requests per measurement")
    fairness.add_argument("--micro-rounds", type=int, default=5, help="measurements per mode, alternated")
    batch = command(
        "batch",
        "interactive chat's TTFT alone and while a large batch runs (alternated rounds); "
        "the batch's throughput alone against plain requests at its concurrency",
    )
    batch.set_defaults(repeat=2)
    batch.add_argument("--slots", type=int, default=8, help="GATEWAY_MAX_CONCURRENT_REQUESTS (the model's slots)")
    batch.add_argument("--headroom", type=float, default=0.1, help="GATEWAY_SCHEDULING_HEADROOM")
    batch.add_argument("--shed-share", type=float, default=0.25, help="GATEWAY_SHED_SHARE")
    batch.add_argument("--concurrency", type=int, default=4, help="interactive users streaming back to back")
    batch.add_argument("--max-tokens", type=int, default=32, help="tokens per interactive request")
    batch.add_argument("--lines", type=int, default=3000, help="lines per batch")
    batch.add_argument("--line-max-tokens", type=int, default=16, help="tokens per batch line")
    batch.add_argument("--batch-concurrency", type=int, default=16, help="GATEWAY_BATCH_CONCURRENCY")
    batch.add_argument("--batch-max-concurrency", type=int, default=8, help="GATEWAY_BATCH_MAX_CONCURRENCY")
    batch.add_argument("--poll-interval", type=float, default=1.0, help="GATEWAY_BATCH_POLL_INTERVAL")
    batch.add_argument(
        "--control",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also a window beside plain requests as many as the batch can run in the free slots",
    )
    batch.add_argument("--duration", type=float, default=25.0, help="measured seconds per interactive window")
    batch.add_argument(
        "--alone", type=float, default=20.0, help="seconds the last batch is measured alone, and plain requests"
    )
    replicas = command(
        "replicas",
        "one gateway over three tritonservers: streams while replicas die or drain (chaos), a slow replica's "
        "share of the requests (slow), the prefix-cache hit rate of conversations per variant (prefix)",
    )
    replicas.add_argument("--phase", default="chaos,slow,prefix", help="comma-separated, of: chaos, slow, prefix")
    replicas.add_argument(
        "--seconds", type=float, default=120.0, help="chaos: seconds of load; prefix: no conversation starts after"
    )
    replicas.add_argument("--streams", type=int, default=24, help="chaos: users streaming back to back")
    replicas.add_argument("--max-tokens", type=int, default=300, help="chaos: tokens per stream (greedy, ignore_eos)")
    replicas.add_argument("--migration-limit", type=int, default=3, help="chaos: the gateway's --migration-limit")
    replicas.add_argument("--seed", type=int, default=1, help="chaos: the strikes' schedule and the sample's order")
    replicas.add_argument("--verify", type=int, default=24, help="chaos: completed streams asked again uninterrupted")
    replicas.add_argument(
        "--slow-seconds", type=float, default=None, help="slow: seconds of load (default: --seconds, at most 40)"
    )
    replicas.add_argument("--slow-users", type=int, default=12, help="slow: users streaming back to back")
    replicas.add_argument("--slow-max-tokens", type=int, default=64, help="slow: tokens per stream (ignore_eos)")
    replicas.add_argument(
        "--slow-delay-ms", type=float, default=4.0, help="slow: TINY_LLM_STEP_DELAY_MS of the first replica"
    )
    replicas.add_argument("--calibrate", type=float, default=6.0, help="slow: seconds of each replica's speed, direct")
    replicas.add_argument("--conversations", type=int, default=48, help="prefix: conversations")
    replicas.add_argument("--turns", type=int, default=6, help="prefix: turns per conversation")
    replicas.add_argument("--concurrency", type=int, default=6, help="prefix: conversations at a time")
    replicas.add_argument("--system-prompts", type=int, default=3, help="prefix: shared system prompts")
    replicas.add_argument("--system-chars", type=int, default=1500, help="prefix: a system prompt's characters")
    replicas.add_argument("--user-chars", type=int, default=150, help="prefix: a user message's mean characters")
    replicas.add_argument("--prefix-max-tokens", type=int, default=32, help="prefix: tokens per answer")
    replicas.add_argument("--cache-blocks", type=int, default=4096, help="prefix: each replica's cache, in blocks")
    replicas.add_argument("--block-chars", type=int, default=16, help="prefix: characters per cache block")
    replicas.add_argument(
        "--prefill-us-per-char", type=float, default=200.0, help="prefix: µs of prefill per uncached character"
    )
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    variants: list[Variant] = args.variant or [THIS]
    if len({v.name for v in variants}) != len(variants) or "floor" in {v.name for v in variants}:
        raise SystemExit("variant names must be distinct, and not 'floor'")
    exit_on_signals()
    report = Report(args.command, variants)
    try:
        status = run(args, variants, report)
    except KeyboardInterrupt:
        log("interrupted: every process this run started is stopped")
        return 130
    markdown = report.write()
    if args.command in plots.PLOTTED:
        plots.write(args.command, report.data, markdown.with_suffix(".png"))
    return status


def run(args: argparse.Namespace, variants: list[Variant], report: Report) -> int:
    status = 0
    if args.command == "load":
        from bench import load

        load.run(args, variants, [scenario(name.strip()) for name in args.scenario.split(",")], report)
    elif args.command == "prompts":
        from bench import prompts

        prompts.run(args, variants, report)
    elif args.command == "soak":
        from bench import soak

        status = soak.run(args, variants, report)
    elif args.command == "agents":
        from bench import agents

        agents.run(args, variants, report)
    elif args.command == "embeddings":
        from bench import embeddings

        embeddings.run(args, variants, report)
    elif args.command == "fairness":
        from bench import fairness

        fairness.run(args, variants, report)
    elif args.command == "batch":
        from bench import batch

        batch.run(args, variants, report)
    elif args.command == "replicas":
        from bench import replicas

        status = replicas.run(args, variants, report)
    else:
        from bench import micro

        micro.run(args, variants, report)
    return status


if __name__ == "__main__":
    sys.exit(main())
