"""``replicas`` slow: does a slow replica get proportionally less of the work?

Three tritonservers serve ``tiny-llm``; the first is started with ``TINY_LLM_STEP_DELAY_MS``
(``--slow-delay-ms`` per decode step), so it makes tokens at a fraction of the others' rate.

* **Speed**: each replica's tokens/s through a gateway of its own (one per replica, beside the
  pooled one), ``--slow-users`` / 3 closed-loop streams each, all three at once for
  ``--calibrate`` s, before the run and after it (the mean: a busy VM moves the reads). The same
  client, gateway work and cores shared as in the run: straight over gRPC, the client's cost
  differs, and a replica that sleeps between steps (the slow one) pays the cores' wake-up latency
  differently. A replica's *speed share* is its part of the three rates.
* **Run**: one gateway over the three, ``--slow-users`` users sending chat streams back to back
  (``--slow-max-tokens`` tokens, ``ignore_eos``, distinct prompts, no session key) for
  ``--slow-seconds``; the gateway's ``x-gateway-replica`` says where each went. A replica's
  *request share* is its part of the requests sent in the window; its tokens/s there come from the
  streams' continuous usage as they arrive.

The bar: the slow replica's request share within 20 % of its speed share (and under a third, the
even split a router blind to speed would give). An engine-load router that sends each request
to the replica with the least work waiting gets there; one that counts its own requests only
gets there too in a closed loop (each replica holds as many streams, the slow one ends fewer),
at the cost of its streams' latency: the streams each replica held (sampled) and their TTFT are
in the table as well.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.procstat import percentile
from bench.replicas_fleet import Client, Fleet, StreamRecord, chat_prompt, chat_request, start_pool_gateway
from bench.report import Report, fmt
from bench.stack import REFERENCE_REPOSITORY, Gateway, Variant, log, start_gateway

MODEL = "tiny-llm"
DELAY_ENV = "TINY_LLM_STEP_DELAY_MS"
SLOW = 0
"""The slow replica's index: the first, where ties between equal loads land."""
WITHIN = 0.2
"""The bar: the slow replica's request share within this fraction of its speed share."""
WARMUP = 2.0
SAMPLE_EVERY = 0.2


def delay_supported() -> bool:
    """Whether the reference model reads the step delay at all (else the run measures nothing)."""
    return any(DELAY_ENV in path.read_text() for path in (REFERENCE_REPOSITORY / MODEL / "1").glob("*.py"))


def shares(values: Mapping[str, float]) -> dict[str, float | None]:
    whole = sum(values.values())
    return {key: (value / whole if whole > 0 else None) for key, value in values.items()}


def replica_rows(
    replicas: list[str],
    sent: Mapping[str, int],
    tokens: Mapping[str, float],
    speed: Mapping[str, float],
    seconds: float,
) -> list[dict[str, Any]]:
    """Each replica's requests and tokens/s in the run, and its speed: rates and shares."""
    request_share = shares({r: float(sent.get(r, 0)) for r in replicas})
    speed_share = shares({r: speed.get(r, 0.0) for r in replicas})
    return [
        {
            "replica": r,
            "slow": i == SLOW,
            "requests": sent.get(r, 0),
            "request_share": request_share[r],
            "tokens_per_s": tokens.get(r, 0.0) / seconds,
            "speed_tokens_per_s": speed.get(r, 0.0),
            "speed_share": speed_share[r],
        }
        for i, r in enumerate(replicas)
    ]


def verdict(rows: list[dict[str, Any]], errors: int) -> dict[str, Any]:
    slow = next(row for row in rows if row["slow"])
    share, speed = slow["request_share"], slow["speed_share"]
    close = share is not None and speed is not None and abs(share - speed) <= WITHIN * speed
    return {
        "slow_request_share": share,
        "slow_speed_share": speed,
        "ok": close and share is not None and share < 1 / len(rows) and errors == 0,
    }


# --------------------------------------------------------------------------- closed-loop users


@dataclass
class SlowRecord(StreamRecord):
    counted: int = 0
    """Completion tokens of this stream already added to its replica's tally."""


def chat_body(index: int, max_tokens: int) -> bytes:
    return orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": chat_prompt(index)}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    )


async def closed_loop(
    targets: Sequence[tuple[int, str | None]], users: int, seconds: float, max_tokens: int
) -> dict[str, Any]:
    """``users`` users streaming back to back, the i-th to ``targets[i % len]`` (a gateway's port,
    and the replica to count its streams under, or None: the one its ``x-gateway-replica`` names).
    Requests sent, tokens arrived, TTFT and streams held in the window ``[WARMUP, WARMUP + seconds)``,
    by replica."""
    start = time.perf_counter()
    window = (start + WARMUP, start + WARMUP + seconds)
    tokens: defaultdict[str, float] = defaultdict(float)
    sent: Counter[str] = Counter()
    routes: Counter[str] = Counter()
    ttft: defaultdict[str, list[float]] = defaultdict(list)
    held: defaultdict[str, list[int]] = defaultdict(list)
    running: dict[int, SlowRecord] = {}
    errors: list[str] = []
    numbers = itertools.count()

    def on_tokens(record: Any, now: float, count: float) -> None:
        if record.first is None:
            record.first = now
        if window[0] <= now < window[1] and record.replica is not None:
            tokens[record.replica] += record.usage_tokens - record.counted
        record.counted = record.usage_tokens
        record.last = now

    async def user(port: int, label: str | None) -> None:
        client = Client(port)
        while time.perf_counter() < window[1]:
            index = next(numbers)
            running[index] = record = SlowRecord(0.0, index=index, replica=label)
            await client.stream(record, chat_request(port, chat_body(index, max_tokens)), on_tokens)
            del running[index]
            if label is not None:
                record.replica = label
            if record.error is not None or not record.saw_done:
                errors.append(f"{record.failure or 'error'}: {record.error}"[:300])
                await asyncio.sleep(0.05)
            if window[0] <= record.sent < window[1] and record.replica is not None:
                sent[record.replica] += 1
                routes[record.route or "-"] += 1
                if record.first is not None:
                    ttft[record.replica].append(record.first - record.sent)
        client.close()

    async def sample() -> None:
        """The streams each replica holds, read every ``SAMPLE_EVERY`` s of the window."""
        await asyncio.sleep(max(0.0, window[0] - time.perf_counter()))
        while time.perf_counter() < window[1]:
            counts = Counter(r.replica for r in running.values() if r.replica is not None)
            for replica in {*counts, *held}:
                held[replica].append(counts[replica])
            await asyncio.sleep(SAMPLE_EVERY)

    await asyncio.gather(sample(), *(user(*targets[i % len(targets)]) for i in range(users)))
    return {
        "sent": dict(sent),
        "tokens": dict(tokens),
        "tokens_per_s": {r: n / seconds for r, n in tokens.items()},
        "routes": dict(routes),
        "ttft_p50_ms": {r: (percentile(v, 0.5) or 0.0) * 1000.0 for r, v in ttft.items()},
        "streams_held": {r: sum(v) / len(v) for r, v in held.items()},
        "errors": len(errors),
        "error_samples": errors[:3],
    }


async def calibrate(alone: list[Gateway], fleet: Fleet, args: Any) -> dict[str, float]:
    """Each replica's tokens/s through a gateway of its own, all three at once, as many streams
    each as the run gives a replica on average."""
    targets = [(gateway.port, url) for gateway, url in zip(alone, fleet.urls, strict=True)]
    users = max(1, round(args.slow_users / fleet.count)) * fleet.count
    measured = await closed_loop(targets, users, args.calibrate, args.slow_max_tokens)
    if measured["errors"]:
        raise RuntimeError(f"the speed's streams failed: {measured['error_samples']}")
    rates: dict[str, float] = measured["tokens_per_s"]
    return {url: rates.get(url, 0.0) for url in fleet.urls}


async def scenario(fleet: Fleet, alone: list[Gateway], pooled: Gateway, args: Any) -> dict[str, Any]:
    log(f"slow: each replica's speed through a gateway of its own, {args.calibrate:g} s")
    before = await calibrate(alone, fleet, args)
    log("slow: " + ", ".join(f"{url} {rate:.0f} tokens/s" for url, rate in before.items()))
    log(f"slow: the gateway over all three, {args.slow_users} users for {args.slow_seconds:g} s")
    run = await closed_loop([(pooled.port, None)], args.slow_users, args.slow_seconds, args.slow_max_tokens)
    log(f"slow: each replica's speed again, {args.calibrate:g} s")
    after = await calibrate(alone, fleet, args)
    speed = {url: (before[url] + after[url]) / 2 for url in fleet.urls}
    rows = replica_rows(fleet.urls, run["sent"], run["tokens"], speed, args.slow_seconds)
    for row in rows:
        row["ttft_p50_ms"] = run["ttft_p50_ms"].get(row["replica"])
        row["streams_held"] = run["streams_held"].get(row["replica"])
        row["speed_reads"] = [before[row["replica"]], after[row["replica"]]]
    per_row = ("sent", "tokens", "tokens_per_s", "ttft_p50_ms", "streams_held")
    return {"rows": rows, **{k: v for k, v in run.items() if k not in per_row}}


def run(args: Any, variant: Variant, workdir: Path) -> dict[str, Any]:
    import uvloop

    env = {SLOW: {DELAY_ENV: f"{args.slow_delay_ms:g}"}}
    with Fleet("slow", REFERENCE_REPOSITORY, MODEL, workdir, env=env) as fleet:
        gateways: list[Gateway] = []
        try:
            for index, url in enumerate(fleet.urls):
                extra = (*args.gateway_arg, f"--triton-metrics={fleet.servers[index].metrics_port}")
                gateways.append(start_gateway(variant, url, workdir / f"gateway-slow-{index}.log", extra))
            pooled = start_pool_gateway(variant, fleet, workdir / "gateway-slow.log", [], args.gateway_arg)
            gateways.append(pooled)
            log(f"slow: gateway {variant.describe()} on {pooled.url}, and one per replica for its speed")
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                results = runner.run(scenario(fleet, gateways[:-1], pooled, args))
        finally:
            for gateway in gateways:
                gateway.stop()
    results |= {"gateway": variant.describe(), "delay_supported": delay_supported()}
    results["verdict"] = verdict(results["rows"], results["errors"])
    return results


def write(report: Report, results: dict[str, Any], args: Any) -> None:
    v = results["verdict"]
    report.add(
        f"## A slow replica: `{MODEL}`, the first replica {args.slow_delay_ms:g} ms slower per decode step",
        "",
        f"Speed: each replica's tokens/s through a gateway of its own, {max(1, round(args.slow_users / 3))} "
        f"streams each, all three at once for {args.calibrate:g} s, before the run and after it (the mean; the "
        f"slow replica's two reads: {' and '.join(fmt(x) for x in results['rows'][SLOW]['speed_reads'])} "
        f"tokens/s). Run: gateway `{results['gateway']}`, {args.slow_users} users streaming "
        f"chat back to back ({args.slow_max_tokens} tokens, `ignore_eos`, no session key) for "
        f"{args.slow_seconds:g} s; routes {', '.join(f'{k} {n}' for k, n in sorted(results['routes'].items()))}; "
        f"errors {results['errors']}."
        + ("" if results["delay_supported"] else f" **The reference model does not read `{DELAY_ENV}`.**"),
        "",
    )
    report.table(
        [
            "replica",
            "requests",
            "request share",
            "tokens/s in the run",
            "speed tokens/s",
            "speed share",
            "streams held (mean)",
            "TTFT p50 ms",
        ],
        [
            [
                row["replica"] + (" (slow)" if row["slow"] else ""),
                str(row["requests"]),
                pct(row["request_share"]),
                fmt(row["tokens_per_s"]),
                fmt(row["speed_tokens_per_s"]),
                pct(row["speed_share"]),
                fmt(row.get("streams_held"), 2),
                fmt(row.get("ttft_p50_ms")),
            ]
            for row in results["rows"]
        ],
    )
    report.add(
        f"- **the slow replica's request share {pct(v['slow_request_share'])} against its speed share "
        f"{pct(v['slow_speed_share'])} (bar: within {WITHIN:.0%} of it, under a third): {'yes' if v['ok'] else 'no'}**",
        "",
    )


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"
