"""``fairness``: does a quiet key keep its latency while another key floods the same model?

One tritonserver and two gateways on it, the same tree and key file, one with
``GATEWAY_SCHEDULING=fair`` and one with ``fifo``. The model is ``scripted`` replaying a paced
script (``--tokens`` tokens on average, ``--delay`` s apart) behind ``--slots`` slots, so its
capacity is known: ``slots / (tokens x delay)`` requests per second. Each request's length is drawn
from half to one and a half times the mean: slots of one length would all end together, and a
request arriving at a full model would wait for the next such burst rather than the next slot.
Three keys: ``A`` and ``B`` (weight 1) and ``C`` (``top_priority = "critical"``), whose requests
ask ``"priority": -1`` in the body.

Phases, each run on both gateways in turn, the order reversed every phase (fair, fifo; fifo,
fair; ...) so a slow stretch of the shared machine falls on both alike:

* ``idle``: B at a tenth of capacity and C at ``--c-rate``: what each sees alone;
* ``flood``: A at ten times capacity (its excess is refused with 429 or waits) and B as before;
* ``priority``: the flood and B, and C again.

Arrivals are open-loop (Poisson, fixed seeds: both gateways get the same schedule), so a slow
gateway cannot slow the arrivals down as a closed loop would. TTFT is the client's, from writing
the request to the first token of the stream. Queue wait is the gateway's own, from its access
log (``GATEWAY_LOG_REQUESTS``, ``queue_ms``), joined to the client's requests by ``x-request-id``;
a gateway whose log has no ``queue_ms`` gets TTFT less the idle TTFT p50 instead, and the report
says so.

Then the scheduler's own cost, in process and with no servers: a model's ``Admission`` with a
queue kept at N waiting requests from K flows, one release and one new waiter per request, fair
against fifo, µs per request.
"""

from __future__ import annotations

import asyncio
import math
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.loadgen import HttpConnection, Record
from bench.procstat import percentile
from bench.report import Report, fmt, ratio
from bench.scenarios import COMPLETIONS, FIREHOSE_TOKEN, paced_script
from bench.stack import Stack, Variant, log, triton_failed

MODEL = "scripted"
KEYS = {"A": "bench-fairness-key-a", "B": "bench-fairness-key-b", "C": "bench-fairness-key-c"}
SEEDS = {"A": 101, "B": 202, "C": 303}
CRITICAL = -1
WITHIN = 1.5
"""The verdict's bound: B's TTFT p50 under the flood within this factor of B's alone."""


def key_file(path: Path) -> Path:
    """A and B at weight 1 and the default band; C may ask for ``critical``."""
    from gateway.keys.policy import hash_key

    text = "".join(
        f'[[key]]\nname = "{name}"\nsha256 = "{hash_key(secret)}"\nweight = 1.0\n'
        + ('top_priority = "critical"\n' if name == "C" else "")
        + "\n"
        for name, secret in KEYS.items()
    )
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- the open-loop client


@dataclass(frozen=True)
class Flow:
    """One key's arrivals in a phase."""

    name: str
    rate: float
    """Requests per second, Poisson."""
    priority: int | None = None
    """The body's ``priority``; None: the key's default band."""


@dataclass(frozen=True)
class Phase:
    name: str
    flows: tuple[Flow, ...]
    warmup: float
    """Seconds of arrivals before the window: the flood's queue fills."""


@dataclass
class Sample:
    """One request as the client saw it (times relative to the phase's start)."""

    flow: str
    request_id: str
    sent: float
    in_window: bool
    status: int = 0
    ttft: float | None = None
    done: float | None = None
    tokens: float = 0.0
    expected: int = 0
    """The tokens its script sends."""
    code: str | None = None
    band: str | None = None
    error: str | None = None


class Probe(HttpConnection):
    """``HttpConnection`` that also keeps the response's headers (``x-gateway-priority``)."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: dict[bytes, bytes] = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    async def request(
        self,
        payload: bytes,
        record: Record,
        on_tokens: Callable[[Record, float, float], None],
        stream: bool,
        chars: int,
    ) -> None:
        self.headers = {}
        await super().request(payload, record, on_tokens, stream, chars)


def payload(port: int, flow: Flow, request_id: str, body: bytes) -> bytes:
    head = (
        f"POST {COMPLETIONS} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nAuthorization: Bearer {KEYS[flow.name]}\r\nX-Request-Id: {request_id}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def body(flow: Flow, tokens: int, delay: float) -> bytes:
    data: dict[str, Any] = {
        "model": MODEL,
        "prompt": paced_script(tokens, delay),
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if flow.priority is not None:
        data["priority"] = flow.priority
    return orjson.dumps(data)


async def drive(
    port: int, label: str, phase: Phase, duration: float, tokens: int, delay: float, drain: float
) -> tuple[list[Sample], dict[str, float]]:
    """Every flow's Poisson arrivals over ``warmup + duration`` seconds; then up to ``drain``
    seconds for the requests still running, cancelled after it. The samples, and each flow's
    tokens that arrived in the window."""
    samples: list[Sample] = []
    window_tokens: Counter[str] = Counter()
    pool: list[Probe] = []
    tasks: set[asyncio.Task[None]] = set()
    start = time.perf_counter()
    window = (start + phase.warmup, start + phase.warmup + duration)
    chars = len(FIREHOSE_TOKEN)

    async def one(flow: Flow, raw: bytes, sample: Sample) -> None:
        record = Record(0.0)

        def on_tokens(record: Record, now: float, count: float) -> None:
            if record.last is None:
                sample.ttft = now - record.sent
            record.last = now
            sample.tokens += count
            if window[0] <= now < window[1]:
                window_tokens[flow.name] += count

        connection = pool.pop() if pool else None
        try:
            if connection is None or connection.closed:
                connection = await Probe.open("127.0.0.1", port)
            await connection.request(raw, record, on_tokens, True, chars)
            sample.status = 200
            if record.error:
                sample.error = record.error
            elif not record.saw_done or record.chars != sample.expected * chars:
                sample.error = f"{record.chars // chars} of {sample.expected} tokens, [DONE] {record.saw_done}"
        except RuntimeError as exc:  # an answer other than 200: its status and error code
            sample.status = connection.status if connection is not None else 0
            text = str(exc)
            sample.error = text[:300]
            try:
                sample.code = orjson.loads(text.partition(": ")[2])["error"].get("code")
            except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
                sample.code = None
        except (OSError, ConnectionError) as exc:
            sample.error = f"{type(exc).__name__}: {exc}"
        finally:
            sample.done = time.perf_counter() - start
            if connection is not None:
                sample.band = (connection.headers.get(b"x-gateway-priority") or b"").decode() or None
                if connection.closed:
                    connection.close()
                else:
                    pool.append(connection)

    async def arrivals(flow: Flow) -> None:
        rng = random.Random(SEEDS[flow.name] * 1000 + sum(map(ord, phase.name)))
        sizes = random.Random(SEEDS[flow.name] * 1000 + sum(map(ord, phase.name)) + 1)
        bodies: dict[int, bytes] = {}
        at, index, end = start, 0, window[1]
        while True:
            at += rng.expovariate(flow.rate)
            if at >= end:
                return
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            index += 1
            request_id = f"{label}-{phase.name}-{flow.name}-{index}"
            count = sizes.randint(max(1, tokens // 2), max(1, tokens * 3 // 2))
            raw_body = bodies.get(count) or bodies.setdefault(count, body(flow, count, delay))
            sample = Sample(flow.name, request_id, at - start, window[0] <= at < window[1], expected=count)
            samples.append(sample)
            task = asyncio.create_task(one(flow, payload(port, flow, request_id, raw_body), sample))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    await asyncio.gather(*(arrivals(flow) for flow in phase.flows))
    if tasks:
        _, pending = await asyncio.wait(set(tasks), timeout=drain)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    for connection in pool:
        connection.close()
    return samples, {name: count / duration for name, count in window_tokens.items()}


def run_phase(
    port: int, label: str, phase: Phase, duration: float, tokens: int, delay: float, drain: float
) -> tuple[list[Sample], dict[str, float]]:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(drive(port, label, phase, duration, tokens, delay, drain))


# --------------------------------------------------------------------------- the gateway's access log


def access_lines(log_file: Path, offset: int) -> dict[str, dict[str, Any]]:
    """The access log's JSON lines after ``offset``, by request id."""
    lines: dict[str, dict[str, Any]] = {}
    with open(log_file, "rb") as handle:
        handle.seek(offset)
        for line in handle:
            if b" gateway.access " not in line:
                continue
            start = line.find(b"{")
            try:
                data = orjson.loads(line[start:])
            except orjson.JSONDecodeError:
                continue
            if isinstance(data, dict) and data.get("request_id"):
                lines[str(data["request_id"])] = data
    return lines


# --------------------------------------------------------------------------- figures


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def summarize(samples: list[Sample], logged: dict[str, dict[str, Any]], tokens_per_s: dict[str, float]) -> dict:
    """Per flow, over the requests sent in the window."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted({s.flow for s in samples}):
        mine = [s for s in samples if s.flow == name and s.in_window]
        ok = [s for s in mine if s.status == 200 and s.error is None and s.ttft is not None]
        waits = [float(w) for s in ok if (w := logged.get(s.request_id, {}).get("queue_ms")) is not None]
        refused = Counter(s.code or str(s.status) for s in mine if s.status == 429)
        others = [s for s in mine if s.status != 429 and (s.status != 200 or s.error)]
        ttfts = [s.ttft for s in ok if s.ttft is not None]
        seconds_per_token = [(s.done - s.sent) / s.expected for s in ok if s.done is not None and s.expected]
        out[name] = {
            "sent": len(mine),
            "ok": len(ok),
            "refused_429": sum(refused.values()),
            "refused_by_code": dict(refused),
            "failed": len(others),
            "failure_samples": [s.error for s in others[:3]],
            "ttft_p50_ms": ms(percentile(ttfts, 0.5)),
            "ttft_p99_ms": ms(percentile(ttfts, 0.99)),
            "queue_ms_p50": percentile(waits, 0.5),
            "queue_ms_p99": percentile(waits, 0.99),
            "queue_from_log": len(waits),
            "bands": dict(Counter(s.band for s in ok)),
            "logged_bands": dict(Counter(logged.get(s.request_id, {}).get("priority") for s in ok)),
            "tokens_per_s": tokens_per_s.get(name, 0.0),
            "request_s_per_token_p50": percentile(seconds_per_token, 0.5),
        }
    return out


# --------------------------------------------------------------------------- the run


def gateway_env(base: Variant, mode: str, keys: Path, slots: int, queue: int, headroom: float) -> Variant:
    env = dict(base.env) | {
        "GATEWAY_SCHEDULING": mode,
        "GATEWAY_SCHEDULING_HEADROOM": str(headroom),
        "GATEWAY_API_KEY_POLICY_FILE": str(keys),
        "GATEWAY_MAX_CONCURRENT_REQUESTS": str(slots),
        "GATEWAY_MAX_QUEUE_SIZE": str(queue),
        "GATEWAY_LOG_REQUESTS": "true",
    }
    return Variant(mode, base.root, tuple(env.items()))


def phases(capacity: float, flood: float, share: float, c_rate: float, warmup: float) -> list[Phase]:
    b = Flow("B", capacity * share)
    c = Flow("C", c_rate, CRITICAL)
    a = Flow("A", capacity * flood)
    return [
        Phase("idle", (b, c), 0.5),
        Phase("flood", (a, b), warmup),
        Phase("priority", (a, b, c), warmup),
    ]


def run(args: Any, variants: list[Variant], report: Report) -> None:
    """``fairness``: the phases on both gateways, then the scheduler's cost in process."""
    base = variants[0]
    workdir = Path(tempfile.mkdtemp(prefix="bench-fairness-"))
    keys = key_file(workdir / "keys.toml")
    sides = [gateway_env(base, mode, keys, args.slots, args.queue, args.headroom) for mode in ("fair", "fifo")]
    service = args.tokens * args.delay
    capacity = args.slots / service
    plan = phases(capacity, args.flood, args.share, args.c_rate, args.warmup)
    results: dict[str, dict[str, dict[str, Any]]] = {side.name: {} for side in sides}
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {side.name: {} for side in sides}
    report.data["settings"] = {
        "slots": args.slots,
        "queue": args.queue,
        "tokens": args.tokens,
        "delay_s": args.delay,
        "service_s": service,
        "capacity_rps": capacity,
        "flows": {p.name: [{"flow": f.name, "rate": f.rate, "priority": f.priority} for f in p.flows] for p in plan},
        "gateways": [side.describe() for side in sides],
    }
    if args.phases:
        with Stack(sides, workdir, ("--log-level=info", *args.gateway_arg)) as stack:
            warm(stack, args.tokens, args.delay)
            for number, phase in enumerate(plan):
                order = sides if number % 2 == 0 else sides[::-1]
                for side in order:
                    gateway = stack.gateways[side.name]
                    offset = gateway.log_file.stat().st_size
                    samples, tokens_per_s = run_phase(
                        gateway.port, side.name, phase, args.duration, args.tokens, args.delay, args.drain
                    )
                    time.sleep(0.3)  # the last access lines reach the file
                    logged = access_lines(gateway.log_file, offset)
                    summary = summarize(samples, logged, tokens_per_s)
                    results[side.name][phase.name] = summary
                    raw[side.name][phase.name] = [
                        s.__dict__ | {"queue_ms": logged.get(s.request_id, {}).get("queue_ms")}
                        for s in samples
                        if s.flow != "A"
                    ]
                    log(f"  {phase.name:>8} {side.name}: " + "; ".join(line(n, f) for n, f in summary.items()))
                    if triton_failed(stack.triton):
                        raise RuntimeError(f"tritonserver died during {phase.name} on {side.name}")
        report.data["phases"] = results
        report.data["samples"] = raw
        write_phases(report, results, args, capacity, service)
    if args.micro:
        cost = micro(args.micro_waiting, args.micro_flows, args.micro_requests, args.micro_rounds)
        report.data["scheduler_cost"] = cost
        write_micro(report, cost, args)


def line(name: str, figures: dict[str, Any]) -> str:
    return (
        f"{name} {figures['ok']}/{figures['sent']} ok, TTFT p50 {fmt(figures['ttft_p50_ms'])} ms "
        f"p99 {fmt(figures['ttft_p99_ms'])}, queue p50 {fmt(figures['queue_ms_p50'])} ms, "
        f"429 {figures['refused_429']}, {fmt(figures['tokens_per_s'])} tok/s"
    )


def warm(stack: Stack, tokens: int, delay: float) -> None:
    """A few requests of each key through each gateway: first-use imports, the key file, the tokenizer."""
    for name, gateway in stack.gateways.items():
        phase = Phase("warm", (Flow("A", 4.0), Flow("B", 4.0), Flow("C", 4.0, CRITICAL)), 0.0)
        samples, _ = run_phase(gateway.port, f"{name}-warm", phase, 1.5, tokens, delay, 10.0)
        bad = [s.error for s in samples if s.status != 200 or s.error]
        if bad:
            raise RuntimeError(f"gateway {name} fails its warm-up: {bad[:3]}")


def queue_wait(figures: dict[str, Any], idle: dict[str, Any], quantile: str) -> tuple[float | None, bool]:
    """The gateway's queue wait, or (no ``queue_ms`` in its log) TTFT less the idle TTFT p50."""
    if figures.get("queue_from_log"):
        return figures[f"queue_ms_{quantile}"], True
    ttft, alone = figures.get(f"ttft_{quantile}_ms"), idle.get("ttft_p50_ms")
    return (None if ttft is None or alone is None else max(0.0, ttft - alone)), False


def measured_capacity(results: dict[str, dict[str, dict[str, Any]]], args: Any) -> str:
    """The capacity from B's requests alone (client side, whole request), as a check of the nominal one."""
    per_token = [by_phase["idle"]["B"].get("request_s_per_token_p50") for by_phase in results.values()]
    known = [x for x in per_token if x]
    if not known:
        return ""
    service = statistics.median(known) * args.tokens
    return f" (measured: {service:.2f} s a request alone, {args.slots / service:.1f} requests/s)"


def write_phases(
    report: Report, results: dict[str, dict[str, dict[str, Any]]], args: Any, capacity: float, service: float
) -> None:
    report.add(
        f"## Fair share and priority: one model, {args.slots} slots, {args.queue} queued at most",
        "",
        f"`{MODEL}` replays {args.tokens // 2}-{args.tokens * 3 // 2} tokens (mean {args.tokens}) "
        f"{args.delay * 1000:.0f} ms apart: {service:.2f} s a request, so {args.slots} slots serve {capacity:.1f} "
        f"requests/s{measured_capacity(results, args)}. B arrives at {args.share:g} x that, A (flood) at "
        f'{args.flood:g} x, C (`priority: {CRITICAL}`, key with `top_priority = "critical"`) at {args.c_rate:g}/s; '
        f"Poisson, open loop, the same schedule on both gateways; "
        "'alone' is the idle phase, B and C together (a small fraction of capacity: neither waits). "
        f"{args.duration:.0f} s windows, the flood's after "
        f"{args.warmup:g} s of warm-up. Headroom (fair only): {args.headroom:g}, "
        f"{math.ceil(args.slots * args.headroom)} slot(s) above the {args.slots}.",
        "",
    )
    estimated = False
    table = []
    for side, by_phase in results.items():
        idle, flood = by_phase["idle"]["B"], by_phase["flood"]["B"]
        wait50, logged50 = queue_wait(flood, idle, "p50")
        wait99, _ = queue_wait(flood, idle, "p99")
        estimated |= not logged50
        table.append(
            [
                side,
                fmt(idle["ttft_p50_ms"]),
                fmt(idle["ttft_p99_ms"]),
                fmt(flood["ttft_p50_ms"]),
                fmt(flood["ttft_p99_ms"]),
                fmt(ratio(flood["ttft_p50_ms"], idle["ttft_p50_ms"]), 2),
                fmt(ratio(flood["ttft_p99_ms"], idle["ttft_p99_ms"]), 2),
                fmt(wait50),
                fmt(wait99),
                f"{flood['ok']}/{flood['sent']}",
                str(flood["refused_429"]),
            ]
        )
    report.add("### B, the quiet key: alone and under A's flood", "")
    report.table(
        [
            "gateway",
            "alone TTFT p50 ms",
            "alone p99",
            "flood TTFT p50 ms",
            "flood p99",
            "p50 ratio",
            "p99 ratio",
            "flood queue wait p50 ms",
            "queue p99",
            "B ok/sent",
            "B 429s",
        ],
        table,
    )
    table = []
    for side, by_phase in results.items():
        idle, under = by_phase["idle"]["C"], by_phase["priority"]["C"]
        wait50, _ = queue_wait(under, idle, "p50")
        wait99, _ = queue_wait(under, idle, "p99")
        b = by_phase["priority"]["B"]
        table.append(
            [
                side,
                fmt(idle["ttft_p50_ms"]),
                fmt(under["ttft_p50_ms"]),
                fmt(under["ttft_p99_ms"]),
                fmt(ratio(under["ttft_p50_ms"], idle["ttft_p50_ms"]), 2),
                fmt(wait50),
                fmt(wait99),
                f"{under['ok']}/{under['sent']}",
                str(under["refused_429"]),
                ",".join(f"{k}" for k in under["bands"] if k is not None) or "–",
                fmt(ratio(b["ttft_p50_ms"], by_phase["idle"]["B"]["ttft_p50_ms"]), 2),
            ]
        )
    report.add("### C, critical (`priority: -1`): alone and under the flood", "")
    report.table(
        [
            "gateway",
            "alone TTFT p50 ms",
            "flood TTFT p50 ms",
            "flood p99",
            "p50 ratio",
            "flood queue wait p50 ms",
            "queue p99",
            "C ok/sent",
            "C 429s",
            "band ran",
            "B p50 ratio (this phase)",
        ],
        table,
    )
    table = []
    for side, by_phase in results.items():
        for phase in ("flood", "priority"):
            a = by_phase[phase]["A"]
            codes = ", ".join(f"{code} {n}" for code, n in sorted(a["refused_by_code"].items())) or "–"
            table.append(
                [
                    side,
                    phase,
                    str(a["sent"]),
                    fmt(a["tokens_per_s"]),
                    str(a["ok"]),
                    str(a["refused_429"]),
                    codes,
                    fmt(a["queue_ms_p50"]),
                    fmt(a["ttft_p50_ms"]),
                    str(a["failed"]),
                ]
            )
    report.add("### A, the flood", "")
    report.table(
        [
            "gateway",
            "phase",
            "sent",
            "tokens/s",
            "ok",
            "429s",
            "429 codes",
            "queue wait p50 ms",
            "TTFT p50 ms",
            "failed",
        ],
        table,
    )
    report.add(
        f"A's ceiling: {args.slots} slots x {args.tokens} tokens / {service:.2f} s = "
        f"{args.slots * args.tokens / service:.0f} tokens/s.",
        "",
    )
    for side, by_phase in results.items():
        idle, flood = by_phase["idle"]["B"], by_phase["flood"]["B"]
        p50 = ratio(flood["ttft_p50_ms"], idle["ttft_p50_ms"])
        good = p50 is not None and p50 <= WITHIN and flood["refused_429"] == 0 and flood["failed"] == 0
        report.add(
            f"- **{side}: B within {WITHIN:g}x of alone: {'yes' if good else 'no'}** "
            f"(TTFT p50 {fmt(p50, 2)}x, {flood['refused_429']} of B's {flood['sent']} refused)",
        )
    report.add(
        "",
        "Ratios are of TTFT, which holds the queue wait; the queue wait is given in ms, not as a ratio, since "
        "alone it is about 0 and any ratio to it means nothing. Verdict: B's TTFT p50 under the flood at most "
        f"{WITHIN:g} x its p50 alone, and none of B's requests refused. p99 over a window's few B requests is "
        "nearly its maximum.",
        "",
    )
    if estimated:
        report.add(
            "The gateways' access logs carry no `queue_ms`: queue waits here are TTFT less the idle TTFT p50.", ""
        )


# --------------------------------------------------------------------------- the scheduler's cost in process


MICRO_SLOTS = 8
"""The micro measurement's slots: headroom 0.1 of them is 1 slot (fair), as on the servers."""


async def _cycle(mode: str, waiting: int, flows: int, requests: int) -> float:
    """µs of this thread's CPU per request through ``Admission`` with the queue kept at
    ``waiting`` from ``flows`` flows: each request one release (the scheduler's pick and the
    handover) and one new waiter (its tag and place). ``waiting`` 0: the fast path,
    ``try_acquire`` and ``release`` with nobody waiting."""
    from gateway.core.admission import Admission, SchedulingRules, Ticket
    from gateway.core.schedule import Claim

    rules = SchedulingRules(policy=mode, headroom=0.1 if mode == "fair" else 0.0)  # type: ignore[arg-type]
    admission = Admission(lambda model: (MICRO_SLOTS, waiting + flows + 16), 3600.0, rules)
    claims = [Claim(flow=f"flow-{i}", prompt_tokens=100 + i, max_tokens=200) for i in range(max(flows, 1))]
    used = (100, 200)
    if waiting == 0:
        start = time.thread_time()
        for index in range(requests):
            ticket = admission.try_acquire("m", None, claims[index % len(claims)])
            assert ticket is not None
            ticket.release(used)
        return (time.thread_time() - start) / requests * 1e6
    granted: list[Ticket] = []
    started = 0

    async def wait_for_slot(claim: Claim) -> None:
        nonlocal started
        started += 1
        granted.append(await admission.acquire("m", None, None, claim))

    gate = admission.gate("m")

    async def settled(spawned: int) -> None:
        """Until every new waiter has asked and every slot handed over has reached its waiter (a
        release wakes nobody when it frees a headroom slot the next waiter may not take)."""
        while started < spawned or len(granted) < gate.running:
            await asyncio.sleep(0)

    tasks = [asyncio.create_task(wait_for_slot(claims[i % flows])) for i in range(waiting + MICRO_SLOTS + 1)]
    await settled(len(tasks))
    assert gate.waiting >= waiting - 1, (gate.waiting, gate.running)
    sent = len(tasks)
    start = time.thread_time()
    for index in range(requests):
        granted.pop(0).release(used)
        tasks.append(asyncio.create_task(wait_for_slot(claims[(sent + index) % flows])))
        await settled(len(tasks))
    elapsed = time.thread_time() - start
    admission.reject_waiting(RuntimeError("done"))
    await asyncio.gather(*tasks, return_exceptions=True)
    return elapsed / requests * 1e6


def measure(mode: str, waiting: int, flows: int, requests: int) -> float:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_cycle(mode, waiting, flows, requests))


def micro(waiting: list[int], flows: list[int], requests: int, rounds: int) -> dict[str, Any]:
    """µs per request through ``Admission`` with ``n`` waiting from ``k`` flows, fair and fifo,
    the order of the two swapped every round."""
    out: dict[str, Any] = {}
    for n in waiting:
        for k in flows if n else [max(flows)]:
            figures: dict[str, list[float]] = {"fair": [], "fifo": []}
            for round_ in range(rounds):
                for mode in ("fair", "fifo") if round_ % 2 == 0 else ("fifo", "fair"):
                    figures[mode].append(measure(mode, n, k, requests))
            cell = {
                "waiting": n,
                "flows": k,
                **{m: statistics.median(v) for m, v in figures.items()},
                "rounds": figures,
            }
            out[f"{n}x{k}"] = cell
            log(f"  scheduler n={n} k={k}: fair {cell['fair']:.2f} µs, fifo {cell['fifo']:.2f} µs per request")
    return out


def write_micro(report: Report, cost: dict[str, Any], args: Any) -> None:
    report.add(
        "## The scheduler's cost per request, in process",
        "",
        f"`gateway.core.admission.Admission`, one model, {MICRO_SLOTS} slots (and fair's headroom of 1): the queue "
        f"kept at N waiting from K flows "
        f"(round robin), each request one release (the scheduler picks and wakes the next) and one new waiter; "
        f"{args.micro_requests} requests per measurement, median of {args.micro_rounds} rounds alternated. "
        "The event loop thread's CPU time. It includes the asyncio task each waiter is and its wake-up, the "
        "same in both modes; fair less fifo is the scheduler's own. N = 0: `try_acquire` and `release` with "
        "nobody waiting, the path of every request on a model with a free slot.",
        "",
    )
    rows = [
        [
            str(v["waiting"]) if v["waiting"] else "0 (fast path)",
            str(v["flows"]),
            fmt(v["fifo"], 2),
            fmt(v["fair"], 2),
            fmt(v["fair"] - v["fifo"], 2, sign=True),
            fmt(ratio(v["fair"], v["fifo"]), 2),
        ]
        for v in cost.values()
    ]
    report.table(["N waiting", "K flows", "fifo µs/request", "fair µs/request", "fair - fifo", "fair / fifo"], rows)
