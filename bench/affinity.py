"""What replica affinity buys: prefix-cache hit rate and TTFT of a multi-turn chat over 3 Tritons.

Issue 15. Starts ``--replicas`` tritonservers at once, each serving only the test model
``prefix_cache`` (tests/triton_models/prefix_cache: a vLLM-style block prefix cache per server,
which charges ``--prefill-us-per-char`` µs of prefill per uncached prompt character, one prefill at
a time per server). Then, for each ``--policies`` entry, it reloads the model on every replica
(a new instance: empty caches; counters are read as deltas), starts one gateway with
``--triton-url h1:p1,h2:p2,h3:p3 --routing-policy <policy>`` and runs the same workload:

* ``--conversations`` conversations of ``--turns`` turns on ``/v1/chat/completions`` (streaming),
  ``--concurrency`` conversations at a time, one turn after the other within a conversation;
* a shared system prompt of ``--system-chars`` characters; the first user message starts with
  ``session:conv-NNN`` (the model logs it, so each replica's log says which sessions it served);
  each turn appends the previous assistant answer, verbatim, and a new user message
  (``--user-chars`` characters of words drawn with a fixed seed, the same for every policy);
* the session key, by ``--session-key``: the ``X-Session-Id`` header (default), the body's
  ``prompt_cache_key`` or ``user``, or none. Only the header is sent by default because it is the
  gateway's first-ranked key and the one a proxy in front can set without touching bodies; the
  key only matters to ``affinity`` (the other policies ignore it).

Per policy it prints: the prefix-cache hit rate (hit characters / prompt characters, summed over
the replicas' ``prefix_cache_*`` counters), the request-level hit rate (requests with any cached
prefix: near 100 % for every policy once the shared system prompt is cached everywhere), TTFT
p50/p95 (send to first content), the requests each replica served, how many sessions were served
by more than one replica (from the replicas' logs), and the gateway's ``x-gateway-route`` header
counts. ``ceiling`` is the hit rate of one unbounded cache that saw every request in order: no
routing can beat it (each new user message is uncached by definition).

Every conversation opens with the same system prompt, so the prefix route first sends new
conversations where that prompt is warm, until the load bound spreads them; their later turns then
follow their own longest match. Results and how the routing got there: bench/results/affinity.md.

The default prefill, 200 µs per uncached character (about 800 µs a token), is slower than a real
GPU's so that prefill, not the CPU these 2 cores share between 3 Tritons, the gateway and the
client, decides the TTFT: at 6 streams and no prefill the TTFT p50 is already about 65 ms here.

Run:  .venv/bin/python bench/affinity.py                          (about 2 minutes)
      .venv/bin/python bench/affinity.py --policies affinity --conversations 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BENCH,
    ROOT,
    TEST_REPOSITORY,
    log,
    machine_info,
    run_and_report,
    start_gateway,
    words_text,
)

MODEL = "prefix_cache"
POLICIES = ("round_robin", "least_loaded", "prefix", "affinity")
SESSION_KEYS = ("header", "prompt_cache_key", "user", "none")
COUNTERS = ("requests", "prompt_chars", "hit_chars", "hit_requests")
WORDS_SEED = 15
WEIGHTS = ROOT / "triton_models" / "weights" / "tiny-llm"
_LOG_LINE = re.compile(r"prefix_cache request id=\S+ session=(\S+) cached_chars=(\d+) prompt_chars=(\d+)")
_METRIC = re.compile(r"^prefix_cache_(\w+)_total\{[^}]*\}\s+(\S+)$")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated routing policies")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=6, help="conversations in flight at once")
    parser.add_argument("--system-chars", type=int, default=1500, help="shared system prompt length")
    parser.add_argument("--user-chars", type=int, default=150, help="mean user message length")
    parser.add_argument("--max-tokens", type=int, default=32, help="answer length (4 characters a token)")
    parser.add_argument("--session-key", choices=SESSION_KEYS, default="header")
    parser.add_argument(
        "--prefill-us-per-char",
        type=float,
        default=200.0,
        help="simulated prefill per uncached character (large enough to dominate this machine's own TTFT)",
    )
    parser.add_argument("--cache-blocks", type=int, default=4096, help="per replica")
    parser.add_argument("--block-chars", type=int, default=16)
    parser.add_argument("--gateway-arg", action="append", default=[], help="extra gateway flag (repeatable)")
    parser.add_argument("--output", type=Path, default=BENCH / "results" / "affinity.json")
    return parser.parse_args(argv)


# --------------------------------------------------------------------------- replicas


def build_repository(directory: Path, parameters: dict[str, str]) -> Path:
    """A repository holding ``prefix_cache`` only, its config.pbtxt ``parameters`` set as given."""
    source = TEST_REPOSITORY / MODEL
    config = (source / "config.pbtxt").read_text()
    for key, value in parameters.items():
        pattern = rf'(key: "{key}"\s*value: \{{ string_value: ")[^"]*(")'
        config, count = re.subn(pattern, rf"\g<1>{value}\g<2>", config)
        if count != 1:
            raise RuntimeError(f"{source / 'config.pbtxt'} has no parameter {key}")
    (directory / MODEL / "1").mkdir(parents=True)
    (directory / MODEL / "config.pbtxt").write_text(config)
    for item in (source / "1").glob("*.py"):
        (directory / MODEL / "1" / item.name).symlink_to(item)
    return directory


def in_parallel(function: Any, servers: list[Any]) -> None:
    """Run ``function(server)`` for every replica at once; raise the first failure after all ended."""
    errors: list[BaseException] = []

    def call(server: Any) -> None:
        try:
            function(server)
        except BaseException as exc:  # noqa: BLE001 - raised below, once every call ended
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(server,)) for server in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def start_replicas(repository: Path, workdir: Path, count: int) -> list[Any]:
    """``count`` tritonservers started together (each takes seconds to load its stub)."""
    from gateway.triton_launcher import TritonServer

    servers = [  # the launcher never picks one port twice in a process, so they can start together
        TritonServer(
            repository,
            log_file=workdir / f"triton-{index}.log",
            extra_args=("--model-control-mode=explicit", f"--load-model={MODEL}"),
        )
        for index in range(count)
    ]
    try:
        in_parallel(lambda server: server.start(), servers)
    except BaseException:
        in_parallel(lambda server: server.stop(), servers)
        raise
    return servers


def _post(url: str) -> None:
    request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310 - loopback
    with urllib.request.urlopen(request, timeout=120) as reply:  # noqa: S310
        reply.read()


def reset_replica(server: Any) -> None:
    """Unload and load the model: a new instance in a new stub process, so an empty cache.

    The counters may survive (a metric with the same name and labels is the same series to
    Triton), so results are deltas from a baseline; the log proves the new instance.
    """
    base = f"http://127.0.0.1:{server.http_port}/v2/repository/models/{MODEL}"
    offset = log_size(server)
    _post(base + "/unload")
    _post(base + "/load")
    with server.log_file.open("rb") as handle:
        handle.seek(offset)
        if b"TRITONBACKEND_ModelInstanceInitialize: " + MODEL.encode() not in handle.read():
            raise RuntimeError(f"{server.grpc_url}: no new {MODEL} instance after a reload:\n{server.log_tail()}")


def replica_counters(server: Any) -> dict[str, float]:
    """The model's four counters on one replica (0 for any not yet exported)."""
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:  # noqa: S310 - loopback
        text = reply.read().decode()
    values = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        match = _METRIC.match(line)
        if match and match[1] in values:
            values[match[1]] += float(match[2])
    return values


def log_size(server: Any) -> int:
    return server.log_file.stat().st_size if server.log_file.exists() else 0


def logged_sessions(server: Any, offset: int) -> list[tuple[str, int, int]]:
    """(session, cached chars, prompt chars) of each request the replica logged after ``offset``."""
    with server.log_file.open("rb") as handle:
        handle.seek(offset)
        text = handle.read().decode(errors="replace")
    return [(m[1], int(m[2]), int(m[3])) for m in _LOG_LINE.finditer(text)]


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Conversation:
    number: int
    user_messages: list[str]

    @property
    def session(self) -> str:
        return f"conv-{self.number:03d}"


def _words(rng: random.Random, chars: int) -> str:
    vocabulary = (
        "replica cache prefix token stream model latency batch prompt answer question gateway server "
        "request session block memory engine kernel tensor schedule route policy warm cold hit miss"
    ).split()
    return words_text(chars, lambda: rng.choice(vocabulary))


def make_workload(args: argparse.Namespace) -> tuple[str, list[Conversation]]:
    """The shared system prompt and every conversation's user messages (deterministic)."""
    rng = random.Random(WORDS_SEED)
    system = "You are a helpful assistant for a platform team. " + _words(rng, args.system_chars)
    system = system[: args.system_chars]
    conversations = []
    for number in range(args.conversations):
        messages = [_words(rng, max(1, int(args.user_chars * rng.uniform(0.7, 1.3)))) for _ in range(args.turns)]
        conversation = Conversation(number, messages)
        messages[0] = f"session:{conversation.session} {messages[0]}"
        conversations.append(conversation)
    return system, conversations


@dataclass
class Turn:
    session: str
    turn: int
    sent_at: float
    ttft_s: float | None = None
    total_s: float | None = None
    replica: str | None = None
    route: str | None = None
    error: str | None = None
    messages: list[dict[str, str]] = field(default_factory=list)
    answer: str = ""


def _request(args: argparse.Namespace, conversation: Conversation, messages: list[dict[str, str]]) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "max_tokens": args.max_tokens, "stream": True}
    if args.session_key == "prompt_cache_key":
        body["prompt_cache_key"] = conversation.session
    elif args.session_key == "user":
        body["user"] = conversation.session
    return body


async def _turn(
    client: httpx.AsyncClient, args: argparse.Namespace, conversation: Conversation, messages: list[dict[str, str]]
) -> Turn:
    headers = {"X-Session-Id": conversation.session} if args.session_key == "header" else {}
    record = Turn(conversation.session, len(messages) // 2, time.perf_counter(), messages=list(messages))
    parts: list[str] = []
    try:
        async with client.stream(
            "POST", "/v1/chat/completions", json=_request(args, conversation, messages), headers=headers
        ) as reply:
            record.replica = reply.headers.get("x-gateway-replica")
            record.route = reply.headers.get("x-gateway-route")
            if reply.status_code != 200:
                record.error = f"HTTP {reply.status_code}: {(await reply.aread()).decode(errors='replace')[:300]}"
                return record
            async for line in reply.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    record.error = json.dumps(chunk["error"])[:300]
                    return record
                for choice in chunk.get("choices", []):
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        if record.ttft_s is None:
                            record.ttft_s = time.perf_counter() - record.sent_at
                        parts.append(content)
    except httpx.HTTPError as exc:
        record.error = repr(exc)[:300]
        return record
    record.total_s = time.perf_counter() - record.sent_at
    record.answer = "".join(parts)
    return record


async def _converse(
    client: httpx.AsyncClient, args: argparse.Namespace, system: str, conversation: Conversation
) -> list[Turn]:
    messages = [{"role": "system", "content": system}]
    turns = []
    for text in conversation.user_messages:
        messages.append({"role": "user", "content": text})
        turn = await _turn(client, args, conversation, messages)
        turns.append(turn)
        if turn.error is not None:
            break  # the next turn would need this answer
        messages.append({"role": "assistant", "content": turn.answer})
    return turns


async def run_workload(
    url: str, args: argparse.Namespace, system: str, conversations: list[Conversation]
) -> list[Turn]:
    pending: asyncio.Queue[Conversation] = asyncio.Queue()
    for conversation in conversations:
        pending.put_nowait(conversation)
    turns: list[Turn] = []
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def worker() -> None:
            while not pending.empty():
                turns.extend(await _converse(client, args, system, pending.get_nowait()))

        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    return turns


async def warm_up(url: str, count: int) -> None:
    """A few short requests before the clock starts (the gateway's first request loads its tokenizer
    and template). They share no block with the workload: their first block is
    ``<|im_start|>user``, the workload's ``<|im_start|>syst``. Streaming, as the workload: a
    non-streaming request through the gateway leaves Triton 2.51 unable to unload the model (the
    gateway cancels the call after its final response; seen with firehose too), and the next
    policy's reload would then leave the old instance behind."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 2, "stream": True}
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for _ in range(count):
            reply = await client.post("/v1/chat/completions", json=body)
            if reply.status_code != 200:
                raise RuntimeError(f"warm-up request failed: {reply.status_code} {reply.text[:300]}")


def ceiling(turns: list[Turn], block_chars: int) -> float | None:
    """Hit rate of one unbounded cache that saw every request in the order they were sent."""
    if str(TEST_REPOSITORY / MODEL / "1") not in sys.path:
        sys.path.insert(0, str(TEST_REPOSITORY / MODEL / "1"))
    from prefix_blocks import PrefixCache

    from gateway.models.templates import ChatTemplate

    template = ChatTemplate.from_directory(WEIGHTS)
    if template is None:
        return None
    cache = PrefixCache(capacity_blocks=10**9, block_chars=block_chars)
    hit = total = 0
    for turn in sorted(turns, key=lambda t: t.sent_at):
        prompt = template.render(turn.messages)
        lookup = cache.admit(prompt)
        cache.insert(prompt + turn.answer)
        hit, total = hit + lookup.cached_chars, total + lookup.prompt_chars
    return hit / total if total else None


# --------------------------------------------------------------------------- one policy


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def run_policy(
    policy: str,
    replicas: list[Any],
    args: argparse.Namespace,
    workdir: Path,
    workload: tuple[str, list[Conversation]],
) -> dict[str, Any]:
    in_parallel(reset_replica, replicas)
    urls = ",".join(server.grpc_url for server in replicas)
    extra = ["--routing-policy", policy, "--model-repository", str(TEST_REPOSITORY), *args.gateway_arg]
    gateway = start_gateway(urls, workdir / f"gateway-{policy}.log", extra)
    try:
        asyncio.run(warm_up(gateway.url, 2 * len(replicas)))
        baseline = [replica_counters(server) for server in replicas]
        offsets = [log_size(server) for server in replicas]
        started = time.perf_counter()
        turns = asyncio.run(run_workload(gateway.url, args, *workload))
        seconds = time.perf_counter() - started
    finally:
        gateway.stop()
    counters = [
        {name: after[name] - before[name] for name in COUNTERS}
        for before, after in zip(baseline, (replica_counters(server) for server in replicas), strict=True)
    ]
    totals = {name: sum(c[name] for c in counters) for name in COUNTERS}
    sessions: defaultdict[str, set[int]] = defaultdict(set)
    for index, server in enumerate(replicas):
        for session, _, _ in logged_sessions(server, offsets[index]):
            sessions[session].add(index)
    ok = [t for t in turns if t.error is None]
    ttfts = [t.ttft_s * 1000 for t in ok if t.ttft_s is not None]
    later = [t.ttft_s * 1000 for t in ok if t.ttft_s is not None and t.turn > 1]
    return {
        "policy": policy,
        "seconds": round(seconds, 1),
        "requests": len(turns),
        "errors": len(turns) - len(ok),
        "error_samples": [t.error for t in turns if t.error][:3],
        "hit_rate": totals["hit_chars"] / totals["prompt_chars"] if totals["prompt_chars"] else None,
        "request_hit_rate": totals["hit_requests"] / totals["requests"] if totals["requests"] else None,
        "ceiling": ceiling(ok, args.block_chars),
        "ttft_p50_ms": _percentile(ttfts, 50),
        "ttft_p95_ms": _percentile(ttfts, 95),
        "ttft_p50_ms_turns_2_plus": _percentile(later, 50),
        "replica_requests": [int(c["requests"]) for c in counters],
        "replica_hit_rates": [c["hit_chars"] / c["prompt_chars"] if c["prompt_chars"] else None for c in counters],
        "sessions_seen": len(sessions),
        "sessions_on_several_replicas": sum(1 for where in sessions.values() if len(where) > 1),
        "routes": dict(Counter(t.route or "-" for t in turns)),
        "replica_headers": dict(Counter(t.replica or "-" for t in turns)),
        "counters": totals,
        "load_average": os.getloadavg(),
        "ttft_p50_ms_by_turn": {
            n: _percentile([t.ttft_s * 1000 for t in ok if t.turn == n and t.ttft_s is not None], 50)
            for n in range(1, args.turns + 1)
        },
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="gw-affinity-"))
    parameters = {
        "cache_blocks": str(args.cache_blocks),
        "block_chars": str(args.block_chars),
        "prefill_us_per_char": str(args.prefill_us_per_char),
    }
    repository = build_repository(workdir / "repository", parameters)
    workload = make_workload(args)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result: dict[str, Any] = {"machine": machine_info(), "settings": settings, "policies": []}
    log(f"starting {args.replicas} tritonservers (logs in {workdir})")
    replicas = start_replicas(repository, workdir, args.replicas)
    try:
        for policy in policies:
            log(f"{policy}: {args.conversations} conversations x {args.turns} turns, {args.concurrency} at once")
            outcome = run_policy(policy, replicas, args, workdir, workload)
            result["policies"].append(outcome)
            log(
                f"{policy}: hit rate {_pct(outcome['hit_rate'])} (ceiling {_pct(outcome['ceiling'])}), "
                f"TTFT p50 {_ms(outcome['ttft_p50_ms'])} p95 {_ms(outcome['ttft_p95_ms'])}, "
                f"replicas {outcome['replica_requests']}, errors {outcome['errors']}"
            )
    finally:
        in_parallel(lambda server: server.stop(), replicas)
    shutil.rmtree(workdir / "repository", ignore_errors=True)
    result["workdir"] = str(workdir)
    return result


# --------------------------------------------------------------------------- report


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def print_table(result: dict[str, Any]) -> None:
    settings = result["settings"]
    print(
        f"\n{settings['conversations']} conversations x {settings['turns']} turns, {settings['concurrency']} at once, "
        f"{settings['replicas']} replicas, system prompt {settings['system_chars']} chars, "
        f"session key: {settings['session_key']}, prefill {settings['prefill_us_per_char']} µs/uncached char, "
        f"cache {settings['cache_blocks']} x {settings['block_chars']} chars per replica"
    )
    print(
        f"{'policy':13} {'hit rate':>9} {'ceiling':>8} {'req hits':>9} {'TTFT p50':>9} {'TTFT p95':>9} "
        f"{'p50 t>1':>8} {'requests per replica':>22} {'split sess':>10} {'errors':>6}  routes"
    )
    for row in result["policies"]:
        spread = "/".join(str(n) for n in row["replica_requests"])
        routes = ", ".join(f"{k} {v}" for k, v in sorted(row["routes"].items()))
        print(
            f"{row['policy']:13} {_pct(row['hit_rate']):>9} {_pct(row['ceiling']):>8} "
            f"{_pct(row['request_hit_rate']):>9} {_ms(row['ttft_p50_ms']):>9} {_ms(row['ttft_p95_ms']):>9} "
            f"{_ms(row['ttft_p50_ms_turns_2_plus']):>8} {spread:>22} "
            f"{row['sessions_on_several_replicas']:>4}/{row['sessions_seen']:<5} {row['errors']:>6}  {routes}"
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    unknown = set(args.policies.split(",")) - set(POLICIES)
    if unknown:
        raise SystemExit(f"unknown policies {sorted(unknown)}; known: {', '.join(POLICIES)}")
    return run_and_report(args, run, print_table)


if __name__ == "__main__":
    raise SystemExit(main())
