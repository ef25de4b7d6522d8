"""``replicas`` prefix: how much of each prompt do the replicas find in their prefix caches?

Three tritonservers serve the test model ``prefix_cache`` (tests/triton_models/prefix_cache: a
vLLM-style block prefix cache per server, ``--cache-blocks`` blocks of 16 characters, charging
``--prefill-us-per-char`` µs of prefill per uncached character, one prefill at a time per server,
so a cold prompt costs what it would on a GPU and load follows the cache). For each ``--variant``,
on three fresh servers (empty caches), one gateway with ``--routing-policy affinity`` runs the
same conversations:

* ``--conversations`` conversations of ``--turns`` streamed turns, ``--concurrency`` at a time,
  turn after turn within one; each opens with one of ``--system-prompts`` shared system prompts of
  ``--system-chars`` characters, carries its session in the ``X-Session-Id`` header, and each turn
  appends the previous answer verbatim and a new user message (words drawn with a fixed seed: the
  same conversations for every variant). No conversation starts after ``--seconds``.

The hit rate is the replicas' hit characters over their prompt characters (their
``prefix_cache_*_total`` counters, summed over the three). ``ceiling`` is one unbounded cache that
saw every request in order: no routing beats it (every new user message is uncached). The bar:
each variant's hit rate within 10 % of the first's (the base).
"""

from __future__ import annotations

import asyncio
import importlib.util
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.procstat import percentile
from bench.replicas_fleet import Client, Fleet, StreamRecord, chat_request, model_copy, start_pool_gateway, total, words
from bench.report import Report, fmt
from bench.stack import ROOT, TEST_REPOSITORY, Variant, log

MODEL = "prefix_cache"
COUNTERS = ("requests", "prompt_chars", "hit_chars", "hit_requests")
WORDS_SEED = 15
WITHIN = 0.1
"""The bar: a variant's hit rate at least (1 - this) of the base's."""
WEIGHTS = ROOT / "triton_models" / "weights" / "tiny-llm"


@dataclass(frozen=True)
class Conversation:
    number: int
    system: int
    """Which shared system prompt it opens with."""
    user_messages: tuple[str, ...]

    @property
    def session(self) -> str:
        return f"conv-{self.number:03d}"


def make_workload(args: Any) -> tuple[list[str], list[Conversation]]:
    """The shared system prompts and every conversation's user messages (the same for a seed)."""
    rng = random.Random(WORDS_SEED)
    systems = [
        (f"You are assistant {n} of a platform team. " + words(rng, args.system_chars))[: args.system_chars]
        for n in range(args.system_prompts)
    ]
    conversations = []
    for number in range(args.conversations):
        messages = [words(rng, max(1, int(args.user_chars * rng.uniform(0.7, 1.3)))) for _ in range(args.turns)]
        messages[0] = f"session:conv-{number:03d} {messages[0]}"
        conversations.append(Conversation(number, number % args.system_prompts, tuple(messages)))
    return systems, conversations


@dataclass
class Turn:
    session: str
    turn: int
    messages: list[dict[str, str]]
    record: StreamRecord = field(default_factory=lambda: StreamRecord(0.0))

    @property
    def ok(self) -> bool:
        return self.record.error is None and self.record.saw_done


def counters(page: str) -> dict[str, float]:
    return {name: total(page, f"prefix_cache_{name}_total") for name in COUNTERS}


def hit_figures(before: Sequence[dict[str, float]], after: Sequence[dict[str, float]]) -> dict[str, Any]:
    """The replicas' counters between two reads: the hit rate over all, each one's requests."""
    deltas = [{n: a[n] - b[n] for n in COUNTERS} for b, a in zip(before, after, strict=True)]
    sums = {n: sum(d[n] for d in deltas) for n in COUNTERS}
    return {
        "hit_rate": sums["hit_chars"] / sums["prompt_chars"] if sums["prompt_chars"] else None,
        "request_hit_rate": sums["hit_requests"] / sums["requests"] if sums["requests"] else None,
        "replica_requests": [int(d["requests"]) for d in deltas],
        "counters": sums,
    }


def split_sessions(turns: Sequence[Turn]) -> tuple[int, int]:
    """(sessions seen, sessions whose turns more than one replica served)."""
    where: defaultdict[str, set[str]] = defaultdict(set)
    for turn in turns:
        if turn.record.replica is not None:
            where[turn.session].add(turn.record.replica)
    return len(where), sum(1 for replicas in where.values() if len(replicas) > 1)


def ceiling(turns: Sequence[Turn], block_chars: int) -> float | None:
    """The hit rate of one unbounded cache that saw every prompt in the order it was sent."""
    from gateway.models.templates import ChatTemplate

    spec = importlib.util.spec_from_file_location("prefix_blocks", TEST_REPOSITORY / MODEL / "1" / "prefix_blocks.py")
    template = ChatTemplate.from_directory(WEIGHTS)
    if spec is None or spec.loader is None or template is None:
        return None
    blocks = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(blocks)  # registered first: its dataclasses look their module up
    cache = blocks.PrefixCache(capacity_blocks=10**9, block_chars=block_chars)
    hit = prompt = 0
    for turn in sorted((t for t in turns if t.ok), key=lambda t: t.record.sent):
        text = template.render(turn.messages)
        lookup = cache.admit(text)
        cache.insert(text + turn.record.text)
        hit, prompt = hit + lookup.cached_chars, prompt + lookup.prompt_chars
    return hit / prompt if prompt else None


# --------------------------------------------------------------------------- one variant


async def converse(client: Client, args: Any, system: str, conversation: Conversation) -> list[Turn]:
    messages = [{"role": "system", "content": system}]
    turns: list[Turn] = []
    for text in conversation.user_messages:
        messages.append({"role": "user", "content": text})
        turn = Turn(conversation.session, len(turns) + 1, list(messages))
        body = orjson.dumps(
            {"model": MODEL, "messages": messages, "max_tokens": args.prefix_max_tokens, "stream": True}
        )
        await client.stream(turn.record, chat_request(client.port, body, {"X-Session-Id": conversation.session}))
        turns.append(turn)
        if not turn.ok:
            break  # the next turn would need this answer
        messages.append({"role": "assistant", "content": turn.record.text})
    return turns


async def workload(port: int, args: Any, systems: list[str], conversations: list[Conversation]) -> list[Turn]:
    pending = list(reversed(conversations))
    turns: list[Turn] = []
    deadline = time.perf_counter() + args.seconds

    async def worker() -> None:
        client = Client(port)
        while pending and time.perf_counter() < deadline:
            conversation = pending.pop()
            turns.extend(await converse(client, args, systems[conversation.system], conversation))
        client.close()

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    return turns


async def warm(port: int, count: int) -> None:
    """Short streams first (the gateway's tokenizer and template): they share no block with the
    workload (their first block is ``<|im_start|>user``, the workload's ``<|im_start|>syst``)."""
    body = orjson.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 2, "stream": True}
    )
    client = Client(port)
    try:
        for _ in range(count):
            record = await client.stream(StreamRecord(0.0), chat_request(port, body))
            if record.error is not None or not record.saw_done:
                raise RuntimeError(f"the gateway fails its warm-up: {record.error}")
    finally:
        client.close()


async def read_counters(fleet: Fleet) -> list[dict[str, float]]:
    async with httpx.AsyncClient(timeout=10.0) as http:
        pages = await asyncio.gather(*(http.get(url) for url in fleet.metrics_urls))
    return [counters(page.text) for page in pages]


async def measure(
    fleet: Fleet, port: int, args: Any, workload_: tuple[list[str], list[Conversation]]
) -> dict[str, Any]:
    await warm(port, 2 * fleet.count)
    before = await read_counters(fleet)
    started = time.perf_counter()
    turns = await workload(port, args, *workload_)
    seconds = time.perf_counter() - started
    figures = hit_figures(before, await read_counters(fleet))
    ok = [t for t in turns if t.ok]
    ttft = [(t.record.first - t.record.sent) * 1000.0 for t in ok if t.record.first is not None]
    sessions, split = split_sessions(turns)
    return figures | {
        "seconds": seconds,
        "conversations": len({t.session for t in turns}),
        "requests": len(turns),
        "errors": len(turns) - len(ok),
        "error_samples": [t.record.error for t in turns if not t.ok][:3],
        "ceiling": ceiling(turns, args.block_chars),
        "ttft_p50_ms": percentile(ttft, 0.5),
        "ttft_p95_ms": percentile(ttft, 0.95),
        "sessions": sessions,
        "sessions_on_several_replicas": split,
        "routes": dict(Counter(t.record.route or "-" for t in turns)),
    }


def run(args: Any, variants: list[Variant], workdir: Path) -> dict[str, Any]:
    import uvloop

    parameters = {
        "cache_blocks": str(args.cache_blocks),
        "block_chars": str(args.block_chars),
        "prefill_us_per_char": f"{args.prefill_us_per_char:g}",
    }
    repository = model_copy(workdir / "repository", MODEL, parameters)
    shared = make_workload(args)
    rows = []
    for variant in variants:
        with Fleet(f"prefix-{variant.name}", repository, MODEL, workdir) as fleet:
            log_file = workdir / f"gateway-prefix-{variant.name}.log"
            gateway = start_pool_gateway(variant, fleet, log_file, ["--routing-policy=affinity"], args.gateway_arg)
            log(f"prefix: gateway {variant.describe()} on {gateway.url}")
            try:
                with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                    row = runner.run(measure(fleet, gateway.port, args, shared))
            finally:
                gateway.stop()
        rows.append({"variant": variant.name} | row)
        log(f"prefix {variant.name}: hit rate {pct(row['hit_rate'])}, {row['requests']} turns, {row['errors']} errors")
    return {"rows": rows, "verdict": verdict(rows)}


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each variant's hit rate over the base's (the first), and whether every one is within the bar."""
    base = rows[0]["hit_rate"]
    ratios = {
        row["variant"]: (row["hit_rate"] / base if base and row["hit_rate"] is not None else None) for row in rows[1:]
    }
    errors = sum(row["errors"] for row in rows)
    within = errors == 0 and all(r is not None and r >= 1 - WITHIN for r in ratios.values())
    return {"over_base": ratios, "ok": within if ratios else None}


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def write(report: Report, results: dict[str, Any], args: Any) -> None:
    rows, v = results["rows"], results["verdict"]
    report.add(
        f"## Prefix-cache hit rate: `{MODEL}` on 3 replicas, `--routing-policy affinity`",
        "",
        f"{args.conversations} conversations of {args.turns} turns, {args.concurrency} at a time (none started "
        f"after {args.seconds:g} s), {args.system_prompts} shared system prompts of {args.system_chars} characters, "
        f"user messages of about {args.user_chars}, answers of {args.prefix_max_tokens} tokens; per replica "
        f"{args.cache_blocks} blocks of {args.block_chars} characters, {args.prefill_us_per_char:g} µs of prefill "
        "per uncached character. Three fresh servers per variant.",
        "",
    )
    report.table(
        ["variant", "hit rate", "over base", "ceiling", "requests with a hit", "TTFT p50 ms", "p95 ms",
         "requests per replica", "sessions split", "conversations", "errors"],
        [
            [row["variant"], pct(row["hit_rate"]), fmt(v["over_base"].get(row["variant"]), 3), pct(row["ceiling"]),
             pct(row["request_hit_rate"]), fmt(row["ttft_p50_ms"]), fmt(row["ttft_p95_ms"]),
             "/".join(map(str, row["replica_requests"])),
             f"{row['sessions_on_several_replicas']}/{row['sessions']}", str(row["conversations"]), str(row["errors"])]
            for row in rows
        ],
    )  # fmt: skip
    if len(rows) > 1:
        report.add(
            f"- **every variant's hit rate within {WITHIN:.0%} of the base's: {'yes' if v['ok'] else 'no'}**", ""
        )
