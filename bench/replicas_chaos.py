"""``replicas`` chaos: do streams survive replicas that die or drain under them?

Three tritonservers serve ``tiny-llm``; one gateway (``--migration-limit``) spreads ``--streams``
users over them, each streaming chat back to back (greedy, ``temperature: 0``, ``--max-tokens``
tokens with ``ignore_eos``, every prompt its own) for ``--seconds``. Meanwhile, every 10-20 s (a
schedule drawn from ``--seed``), a replica is struck: SIGKILL (``kill``) or SIGTERM (``drain``:
Triton refuses new requests and gives its running ones its 5 s exit timeout; SIGKILL if it has
not exited 15 s after the signal), half each, and started again on its own ports 5 s after it is
gone. The victim is drawn among the replicas running and in the gateway's rotation
(``gateway_replica_up``: one started again sits out its ejection backoff first, serving
nothing), and only while another such one is left for its streams to move to; else the strike
is skipped.

A stream is *completed* when it ended with a finish reason and ``[DONE]`` and no error, *lost*
when it ended otherwise (an error event, a broken connection, no ``[DONE]``); a request the
gateway answered with an error status began no stream and is counted *refused* (its user waits
0.5 s, as a client backs off). The replica that started a stream (its ``x-gateway-replica``)
killed while it ran means the stream was migrated; drained, that it finished within the exit
timeout or was migrated. The gateway's ``/metrics`` give the migrations by outcome and the time
each continued one took (failure to the new replica's first tokens). Afterwards a sample of
completed streams, struck ones first, is asked again with every replica up: greedy decoding
gives the same text and usage again, or the migration changed what the client got.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.replicas_fleet import (
    Client,
    Fleet,
    StreamRecord,
    chat_prompt,
    chat_request,
    samples,
    settings_field,
    start_pool_gateway,
)
from bench.replicas_strikes import (
    EVERY,
    MIGRATION_SECONDS,
    MIGRATIONS,
    OUTCOMES,
    REFUSED,
    Strike,
    Struck,
    chaos_schedule,
    choose_victim,
    first_difference,
    migration_figures,
    outcome,
    pick_sample,
    stream_rows,
    summarize_streams,
)
from bench.report import Report, fmt
from bench.stack import REFERENCE_REPOSITORY, Gateway, Variant, log

MODEL = "tiny-llm"
RESTART_AFTER = 5.0
"""Seconds a struck replica stays down once its process is gone."""
DRAIN = 60.0
"""Seconds the streams running when the window closes get to end."""
VERIFY_CONCURRENCY = 6
UP = "gateway_replica_up"
REFUSED_PAUSE = 0.5
"""Seconds a user waits after a refusal before it asks again."""


# --------------------------------------------------------------------------- the run


def chat_body(index: int, max_tokens: int) -> bytes:
    return orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": chat_prompt(index)}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


@dataclass
class Load:
    """The users' streams, as they run."""

    port: int
    max_tokens: int
    records: list[StreamRecord]
    running: dict[int, StreamRecord]
    numbers: itertools.count[int]

    async def user(self, end: float) -> None:
        client = Client(self.port)
        while time.perf_counter() < end:
            index = next(self.numbers)
            record = StreamRecord(time.perf_counter(), index=index)
            self.records.append(record)
            self.running[index] = record
            await client.stream(record, chat_request(self.port, chat_body(index, self.max_tokens)))
            del self.running[index]
            if outcome(record) != "completed":
                await asyncio.sleep(REFUSED_PAUSE if outcome(record) == REFUSED else 0.05)
        client.close()

    def in_flight(self, replica: str) -> int:
        return sum(1 for r in self.running.values() if r.replica == replica)


async def strike_one(fleet: Fleet, load: Load, index: int, strike: Strike, record: Struck) -> None:
    record.time = time.perf_counter()
    record.in_flight = load.in_flight(record.replica or "")
    try:
        await asyncio.to_thread(fleet.strike, index, strike.how)
        record.gone_s = time.perf_counter() - record.time
        await asyncio.sleep(RESTART_AFTER)
        await asyncio.to_thread(fleet.restart, index)
        record.back_s = time.perf_counter() - record.time
    except Exception as exc:  # noqa: BLE001 - reported; the replica stays down
        record.error = f"{type(exc).__name__}: {exc}"[:300]
    log(f"  {strike.how} {record.replica} ({record.in_flight} streams on it): back after {fmt(record.back_s)} s")


async def in_rotation(fleet: Fleet, gateway_url: str) -> list[int]:
    """The replicas the gateway has in rotation (``gateway_replica_up``): a replica started again
    may still sit out its ejection backoff. A tree without the gauge: every replica."""
    page = await metrics_page(gateway_url)
    up = {labels.get("replica") for labels, value in samples(page, UP) if value == 1}
    return [i for i, url in enumerate(fleet.urls) if url in up] if UP in page else list(range(fleet.count))


async def run_strikes(
    fleet: Fleet, load: Load, schedule: Sequence[Strike], start: float, gateway_url: str
) -> list[Struck]:
    struck: list[Struck] = []
    tasks = []
    for strike in schedule:
        await asyncio.sleep(max(0.0, start + strike.at - time.perf_counter()))
        victim = choose_victim(fleet.live(), await in_rotation(fleet, gateway_url), strike.draw)
        record = Struck(strike.at, strike.how, None if victim is None else fleet.urls[victim])
        struck.append(record)
        if victim is None:
            record.error = "skipped: fewer than 2 replicas live and in the gateway's rotation"
            continue
        fleet.down.add(victim)
        tasks.append(asyncio.create_task(strike_one(fleet, load, victim, strike, record)))
    await asyncio.gather(*tasks)
    return struck


async def metrics_page(url: str) -> str:
    async with httpx.AsyncClient(timeout=10.0) as http:
        return (await http.get(url + "/metrics")).text


async def warm(port: int, replicas: int) -> None:
    """A few short streams on every replica's path: the tokenizer and each model's first forward."""

    async def one(index: int) -> StreamRecord:
        client = Client(port)
        try:
            return await client.stream(StreamRecord(0.0), chat_request(port, chat_body(-1 - index, 8)))
        finally:
            client.close()

    records = await asyncio.gather(*(one(i) for i in range(3 * replicas)))
    wrong = [f"{outcome(r)}: {r.error}" for r in records if outcome(r) != "completed"]
    if wrong:
        raise RuntimeError(f"the gateway fails its warm-up: {wrong[:3]}")


async def verify(port: int, sample: Sequence[StreamRecord], max_tokens: int) -> dict[str, Any]:
    """Each sampled stream asked again, uninterrupted: the same text and usage, or a mismatch."""
    gate = asyncio.Semaphore(VERIFY_CONCURRENCY)
    mismatches: list[dict[str, Any]] = []
    failed = 0

    async def again(record: StreamRecord) -> None:
        nonlocal failed
        async with gate:
            client = Client(port)
            fresh = await client.stream(
                StreamRecord(0.0, index=record.index), chat_request(port, chat_body(record.index, max_tokens))
            )
            client.close()
        if outcome(fresh) != "completed":
            failed += 1
        elif fresh.text != record.text or fresh.usage_tokens != record.usage_tokens:
            at = first_difference(fresh.text, record.text)
            mismatches.append(
                {"index": record.index, "first_difference_at": at, "chars": [len(record.text), len(fresh.text)],
                 "usage": [record.usage_tokens, fresh.usage_tokens]}
            )  # fmt: skip

    await asyncio.gather(*(again(r) for r in sample))
    return {"sampled": len(sample), "mismatches": len(mismatches), "replay_failed": failed, "samples": mismatches[:5]}


async def scenario(fleet: Fleet, gateway: Gateway, args: Any) -> dict[str, Any]:
    await warm(gateway.port, fleet.count)
    schedule = chaos_schedule(args.seed, args.seconds)
    before = await metrics_page(gateway.url)
    load = Load(gateway.port, args.max_tokens, [], {}, itertools.count())
    log(f"chaos: {args.streams} users for {args.seconds:g} s, {len(schedule)} strikes planned")
    start = time.perf_counter()
    end = start + args.seconds
    users = [asyncio.create_task(load.user(end)) for _ in range(args.streams)]
    struck = await run_strikes(fleet, load, schedule, start, gateway.url)
    _, pending = await asyncio.wait(users, timeout=max(1.0, end + DRAIN - time.perf_counter()))
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    elapsed = time.perf_counter() - start
    after = await metrics_page(gateway.url)
    streams = summarize_streams(load.records, struck, args.max_tokens)
    log(f"chaos: {streams['completed']} of {streams['started']} streams completed, {streams['lost']} lost")
    sample = pick_sample(load.records, struck, args.verify, args.seed)
    log(f"chaos: asking {len(sample)} completed streams again, uninterrupted")
    verified = await verify(gateway.port, sample, args.max_tokens)
    return {
        "elapsed_s": elapsed,
        "streams": streams,
        "migration": migration_figures(before, after),
        "verify": verified,
        "strikes": [s.__dict__ for s in struck],
        "stream_rows": stream_rows(load.records, start),
    }


def run(args: Any, variant: Variant, workdir: Path) -> dict[str, Any]:
    import uvloop

    own = [f"--migration-limit={args.migration_limit}"] if settings_field(variant, "migration_limit") else []
    with Fleet("chaos", REFERENCE_REPOSITORY, MODEL, workdir) as fleet:
        gateway = start_pool_gateway(variant, fleet, workdir / "gateway-chaos.log", own, args.gateway_arg)
        log(f"chaos: gateway {variant.describe()} on {gateway.url}, over {', '.join(fleet.urls)}")
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                results = runner.run(scenario(fleet, gateway, args))
        finally:
            gateway.stop()
    results |= {"gateway": variant.describe(), "gateway_flags": own}
    results["verdict"] = verdict(results)
    return results


def verdict(results: dict[str, Any]) -> dict[str, Any]:
    streams, verified = results["streams"], results["verify"]
    return {
        "lost": streams["lost"],
        "mismatches": verified["mismatches"],
        "ok": streams["lost"] == 0 and verified["mismatches"] == 0 and streams["usage_wrong"] == 0,
    }


# --------------------------------------------------------------------------- the report


def write(report: Report, results: dict[str, Any], args: Any) -> None:
    s, m, v = results["streams"], results["migration"], results["verify"]
    done = [x for x in results["strikes"] if x["error"] is None]
    report.add(
        f"## Chaos: `{MODEL}` on 3 replicas, a replica struck every {EVERY[0]:g}-{EVERY[1]:g} s",
        "",
        f"{args.streams} users streaming chat back to back for {args.seconds:g} s ({args.max_tokens} tokens, "
        f"greedy, `ignore_eos`, distinct prompts), gateway `{results['gateway']}` "
        f"{' '.join(results['gateway_flags']) or '(no --migration-limit: its tree has none)'}. "
        f"{len(done)} strikes ({', '.join(f'{k} {n}' for k, n in Counter(x['how'] for x in done).items())}), "
        f"{len(results['strikes']) - len(done)} skipped or failed; each struck replica started again on its "
        f"ports {RESTART_AFTER:g} s after it was gone (seed {args.seed}).",
        "",
    )
    lost = ", ".join(f"{k} {n}" for k, n in s["lost_by_kind"].items()) or "none"
    report.table(
        ["requests", "completed", "lost", "lost by kind", "refused (no stream)", "struck while running",
         "usage ≠ max_tokens"],
        [[str(s["started"]), str(s["completed"]), str(s["lost"]), lost, str(s["refused"]), str(s["struck_streams"]),
          str(s["usage_wrong"])]],
    )  # fmt: skip
    counts = m["migrations"]
    report.add(
        f"Migrations (the gateway's `{MIGRATIONS}`{'' if m['exported'] else ': not exported by this tree'}): "
        + ", ".join(f"{o} {fmt(counts[o], 0)}" for o in OUTCOMES)
        + f"; added latency per continued migration (`{MIGRATION_SECONDS}`, failure to the new replica's first "
        f"tokens): mean {fmt(m['added_mean_ms'])} ms, p95 {fmt(m['added_p95_ms'])} ms over {fmt(m['timed'], 0)}.",
        "",
    )
    groups = {
        "kill": "its replica killed under it (migrated)",
        "drain": "its replica drained under it (finished in the drain, or migrated)",
        "None": "not struck",
    }
    report.table(
        ["completed streams", "count", "largest gap p50 ms", "p95 ms", "max ms"],
        [
            [name, str(g["streams"]), fmt(g["max_gap_p50_ms"]), fmt(g["max_gap_p95_ms"]), fmt(g["max_gap_max_ms"])]
            for key, name in groups.items()
            for g in (s["gaps"][key],)
        ],
    )
    report.table(
        ["strike at s", "how", "replica", "streams it started, running", "gone after s", "back after s", "note"],
        [
            [fmt(x["at"]), x["how"], x["replica"] or "–", str(x["in_flight"]), fmt(x["gone_s"]), fmt(x["back_s"]),
             x["error"] or ""]
            for x in results["strikes"]
        ],
    )  # fmt: skip
    report.add(
        f"Asked again uninterrupted: {v['sampled']} completed streams (struck ones first): **{v['mismatches']} "
        f"mismatches** of text or usage, {v['replay_failed']} replays failed.",
        "",
    )
    if s["failure_samples"] or v["samples"]:
        report.add(*(f"- {x}" for x in [*s["failure_samples"], *map(str, v["samples"])]), "")
    ok = results["verdict"]["ok"]
    report.add(
        f"- **streams lost: {s['lost']} (bar: 0); mismatches: {v['mismatches']} (bar: 0): {'yes' if ok else 'no'}**; "
        f"requests refused before a stream began: {s['refused']}",
        "",
    )
