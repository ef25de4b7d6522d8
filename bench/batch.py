"""``batch``: does interactive chat keep its latency while a large batch runs, and how fast does the
batch go on the capacity it is left?

One tritonserver (the reference ``tiny-llm``) and one gateway on it, with its store (SQLite) in a
temporary folder and ``--slots`` slots for the model. Batch lines run in the ``jobs_priority``
band, which the scheduler sheds whenever no slot is free to it, so a line takes a slot only while one
is free, and while interactive requests run, only up to the shed bands' share (``--shed-share``,
rounded down, one at least): interactive requests never queue behind a line, and the batch leaves
a busy model mostly to them.

Every round (``--repeat``, alternated A B A B ... so a slow stretch of the shared machine falls
on every phase alike):

* ``alone`` (A): ``--concurrency`` users stream chat back to back for ``--duration`` s: TTFT
  p50/p99 and completion tokens/s;
* ``plain`` (the control, ``--no-control`` skips it): the same users beside as many users of plain
  non-streaming requests with a line's body as the batch can hold slots in the ones left free
  (``min(batch_concurrency, batch_max_concurrency, slots - concurrency, the share)``): the load the batch
  adds, without the batch, so what the batch costs beyond it is the batch's own;
* ``batch`` (B): a batch of ``--lines`` chat lines is uploaded and created, and once the runner
  holds lines, the same users for the same window. A watcher reads the batch and ``/metrics``
  every ``PROBE_EVERY`` s (in every phase, so each carries its cost): the batch must be
  ``in_progress`` with lines left at every read, the window's last included, or the round's
  figures do not count as "while a batch runs". The batch is cancelled after B, except in the
  last round.

After the last round the last batch runs alone for up to ``--alone`` s: its lines/s from the
batch's own counts, its completion tokens/s from the output file (every line's usage read). Then
plain non-streaming requests with a line's very body, at the batch's concurrency
(``min(batch_concurrency, batch_max_concurrency)``), straight to the same gateway for as long:
the rate the model gives that load, which the batch's is compared with.

Every request and line is checked: ``ignore_eos`` makes each run to its ``max_tokens`` exactly,
so usage and ``finish_reason: length`` are known in advance.

What the figures are of: the gateway keeps a batch out of the slots interactive requests need,
but whatever slots the batch holds, the model runs. ``tiny-llm`` steps its sequences one at a
time (round robin, no batched forward), so each sequence the batch adds slows every interactive
stream's tokens in proportion, as it delays a new request's first token; an engine with batched
decode (vLLM, TensorRT-LLM on a GPU) pays far less per added sequence. With ``--slots`` equal to
``--concurrency`` the batch gets a slot only between two interactive requests, and barely runs.
"""

from __future__ import annotations

import asyncio
import math
import re
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson

from bench.loadgen import HttpConnection, Record
from bench.procstat import percentile
from bench.report import Report, fmt, ratio
from bench.scenarios import CHAT, prompt_text
from bench.stack import Stack, Variant, log, triton_failed

MODEL = "tiny-llm"
WITHIN = 1.5
"""The verdict's bound: interactive TTFT p50 while the batch runs within this factor of alone."""
PROMPT_BYTES = 200
PROBE_EVERY = 1.0
"""Seconds between two reads of the batch and ``/metrics``."""
FINAL = ("completed", "expired", "cancelled", "failed")
T = TypeVar("T")


# --------------------------------------------------------------------------- what is sent


def chat_body(max_tokens: int, stream: bool) -> dict[str, Any]:
    """The one request both sides send: a line's body, and (streamed) an interactive request's."""
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt_text(PROMPT_BYTES)}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


def input_file(lines: int, max_tokens: int) -> bytes:
    """A batch input file of ``lines`` chat requests (OpenAI's JSONL, ``custom_id`` ``line-<n>``)."""
    body = chat_body(max_tokens, stream=False)
    return b"".join(
        orjson.dumps({"custom_id": f"line-{n}", "method": "POST", "url": CHAT, "body": body}) + b"\n"
        for n in range(lines)
    )


def http_request(port: int, body: dict[str, Any]) -> bytes:
    raw = orjson.dumps(body)
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(raw)}\r\n\r\n"
    )
    return head.encode() + raw


# --------------------------------------------------------------------------- closed-loop users


@dataclass
class Tally:
    """What the users saw in one window: TTFT over requests sent in it, tokens of requests ended in it."""

    duration: float
    ttft: list[float] = field(default_factory=list)
    tokens: int = 0
    ended: int = 0
    sent: int = 0
    errors: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {
            "requests_sent": self.sent,
            "requests_ended": self.ended,
            "ttft_p50_ms": ms(percentile(self.ttft, 0.5)),
            "ttft_p99_ms": ms(percentile(self.ttft, 0.99)),
            "tokens_per_s": self.tokens / self.duration,
            "requests_per_s": self.ended / self.duration,
            "errors": len(self.errors),
            "error_samples": self.errors[:3],
        }


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def problem(record: Record, expect: int) -> str | None:
    """Why a request's answer is not the one asked for (None: it is)."""
    if record.error:
        return record.error
    if not record.saw_done:
        return "no [DONE]"
    if record.usage_tokens != expect or record.finish_reason != "length":
        return f"usage {record.usage_tokens} of {expect} tokens, finish_reason {record.finish_reason!r}"
    return None


async def drive_users(port: int, body: dict[str, Any], concurrency: int, warmup: float, duration: float) -> Tally:
    """``concurrency`` users sending ``body`` back to back, one keep-alive connection each."""
    raw, stream, expect = http_request(port, body), bool(body.get("stream")), int(body["max_tokens"])
    start = time.perf_counter()
    window = (start + warmup, start + warmup + duration)
    tally = Tally(duration)

    def on_tokens(record: Record, now: float, count: float) -> None:
        if record.last is None and window[0] <= record.sent < window[1]:
            tally.ttft.append(now - record.sent)
        record.last = now

    async def user() -> None:
        connection: HttpConnection | None = None
        while time.perf_counter() < window[1]:
            if connection is None or connection.closed:
                connection = await HttpConnection.open("127.0.0.1", port)
            record = Record(0.0)
            try:
                await connection.request(raw, record, on_tokens, stream, 1)
            except Exception as exc:  # noqa: BLE001 - counted, and the user goes on
                record.error = record.error or f"{type(exc).__name__}: {exc}"
                connection.close()
                connection = None
                await asyncio.sleep(0.05)
            wrong = problem(record, expect)
            if wrong is not None:
                tally.errors.append(wrong[:300])
            elif record.done is not None and window[0] <= record.done < window[1]:
                tally.ended += 1
                tally.tokens += record.usage_tokens
            tally.sent += window[0] <= record.sent < window[1]
        if connection is not None:
            connection.close()

    await asyncio.gather(*(user() for _ in range(concurrency)))
    return tally


# --------------------------------------------------------------------------- the batch and the gateway's gauges


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the series of ``name`` whose labels include ``labels`` in a Prometheus page."""
    total = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$")
    for line in text.splitlines():
        found = pattern.match(line)
        if found is None:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', found.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(found.group(2))
    return total


@dataclass(frozen=True)
class Probe:
    """One read of the batch and the gateway's gauges, ``at`` seconds into the phase."""

    at: float
    slots_running: float
    lines_running: float
    shed: float
    status: str | None = None
    completed: int = 0
    failed: int = 0
    total: int = 0


class BatchApi:
    """The Batch API as a client drives it (``httpx``: the openai SDK's own transport)."""

    def __init__(self, url: str) -> None:
        import httpx

        self.http = httpx.AsyncClient(base_url=url, timeout=60.0)

    async def submit(self, content: bytes) -> str:
        upload = await self.http.post(
            "/v1/files", files={"file": ("lines.jsonl", content, "application/jsonl")}, data={"purpose": "batch"}
        )
        upload.raise_for_status()
        batch = await self.http.post(
            "/v1/batches",
            json={"input_file_id": upload.json()["id"], "endpoint": CHAT, "completion_window": "24h"},
        )
        batch.raise_for_status()
        return str(batch.json()["id"])

    async def batch(self, batch_id: str) -> dict[str, Any]:
        reply = await self.http.get(f"/v1/batches/{batch_id}")
        reply.raise_for_status()
        return dict(reply.json())

    async def cancel(self, batch_id: str) -> None:
        (await self.http.post(f"/v1/batches/{batch_id}/cancel")).raise_for_status()

    async def lines(self, file_id: str | None) -> list[dict[str, Any]]:
        if file_id is None:
            return []
        reply = await self.http.get(f"/v1/files/{file_id}/content")
        reply.raise_for_status()
        return [orjson.loads(line) for line in reply.content.splitlines() if line.strip()]

    async def probe(self, start: float, batch_id: str | None) -> Probe:
        page = (await self.http.get("/metrics")).text
        gauges = (
            metric(page, "gateway_requests_running", model=MODEL),
            metric(page, "gateway_batch_lines_running"),
            metric(page, "gateway_requests_shed_total", model=MODEL),
        )
        if batch_id is None:
            return Probe(time.perf_counter() - start, *gauges)
        batch = await self.batch(batch_id)
        counts = batch.get("request_counts") or {}
        return Probe(
            time.perf_counter() - start,
            *gauges,
            status=batch["status"],
            completed=int(counts.get("completed", 0)),
            failed=int(counts.get("failed", 0)),
            total=int(counts.get("total", 0)),
        )

    async def watch(
        self, batch_id: str | None, probes: list[Probe], until: Callable[[Probe], bool], start: float
    ) -> None:
        """Reads every ``PROBE_EVERY`` s into ``probes`` until ``until`` says so (or cancelled)."""
        while True:
            probes.append(await self.probe(start, batch_id))
            if until(probes[-1]):
                return
            await asyncio.sleep(PROBE_EVERY)

    async def wait(self, batch_id: str, done: Callable[[Probe], bool], within: float) -> Probe:
        probes: list[Probe] = []
        await asyncio.wait_for(self.watch(batch_id, probes, done, time.perf_counter()), within)
        return probes[-1]

    async def close(self) -> None:
        await self.http.aclose()


async def watched(api: BatchApi, batch_id: str | None, work: Awaitable[T]) -> tuple[T, list[Probe]]:
    """``work``, with the batch and the gauges read while it runs and once after it."""
    probes: list[Probe] = []
    start = time.perf_counter()
    watcher = asyncio.create_task(api.watch(batch_id, probes, lambda probe: False, start))
    try:
        tally = await work
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    probes.append(await api.probe(start, batch_id))
    return tally, probes


def throughout(probes: list[Probe]) -> bool:
    """Whether the batch was running, with lines left, at every read."""
    return bool(probes) and all(p.status == "in_progress" and p.completed + p.failed < p.total for p in probes)


def progress(probes: list[Probe]) -> tuple[int, float]:
    """Lines ended, and seconds, from the first read to the last that saw the batch in progress
    (or the first that saw it done: its last lines count, not the wait after them)."""
    end = next((i for i, p in enumerate(probes) if p.status != "in_progress"), len(probes) - 1)
    first, last = probes[0], probes[end]
    return last.completed + last.failed - first.completed - first.failed, last.at - first.at


def line_rate(probes: list[Probe]) -> float | None:
    lines, span = progress(probes)
    return lines / span if span > 0 else None


# --------------------------------------------------------------------------- the run


def gateway_env(base: Variant, args: Any, store: Path) -> Variant:
    env = dict(base.env) | {
        "GATEWAY_RESPONSES_STORE": f"sqlite:///{store}",
        "GATEWAY_MAX_CONCURRENT_REQUESTS": str(args.slots),
        "GATEWAY_SCHEDULING_HEADROOM": str(args.headroom),
        "GATEWAY_SHED_SHARE": str(args.shed_share),
        "GATEWAY_BATCH_CONCURRENCY": str(args.batch_concurrency),
        "GATEWAY_BATCH_MAX_CONCURRENCY": str(args.batch_max_concurrency),
        "GATEWAY_BATCH_POLL_INTERVAL": str(args.poll_interval),
    }
    return Variant(base.name, base.root, tuple(env.items()))


def summarize_round(tally: Tally, probes: list[Probe], lines_per_s: float | None) -> dict[str, Any]:
    out = tally.figures() | {"probes": [p.__dict__ for p in probes]}
    if probes and probes[0].status is not None:
        out |= {
            "batch_ran_throughout": throughout(probes),
            "batch_lines_done": progress(probes)[0],
            "batch_lines_per_s": lines_per_s,
            "batch_lines_held_mean": statistics.fmean(p.lines_running for p in probes),
        }
    out["slots_running_mean"] = statistics.fmean(p.slots_running for p in probes) if probes else None
    out["shed"] = probes[-1].shed - probes[0].shed if probes else 0
    return out


async def interactive(api: BatchApi, port: int, args: Any, batch_id: str | None, extra: int = 0) -> dict[str, Any]:
    """The interactive users' window; with ``extra``, as many users of plain requests with a
    line's body beside them (the control: the batch's load, without the batch)."""
    users = drive_users(port, chat_body(args.max_tokens, stream=True), args.concurrency, 1.0, args.duration)
    load = drive_users(port, chat_body(args.line_max_tokens, stream=False), extra, 1.0, args.duration)
    (tally, plain), probes = await watched(api, batch_id, asyncio.gather(users, load))
    figures = summarize_round(tally, probes, line_rate(probes) if batch_id else None)
    if extra:
        figures["plain_load"] = plain.figures() | {"concurrency": extra}
        figures["errors"] += len(plain.errors)
    if batch_id:
        log(
            f"    batch {figures['batch_lines_done']} lines in the window, in progress throughout: "
            f"{figures['batch_ran_throughout']}, {figures['shed']:.0f} sheds"
        )
    return figures


async def start_batch(api: BatchApi, lines: int, max_tokens: int) -> str:
    """A batch created and seen running (the runner holds lines, or some are done)."""
    batch_id = await api.submit(input_file(lines, max_tokens))
    await api.wait(batch_id, lambda p: p.lines_running > 0 or p.completed + p.failed > 0, 30.0)
    return batch_id


async def stop_batch(api: BatchApi, batch_id: str) -> None:
    await api.cancel(batch_id)
    await api.wait(batch_id, lambda p: p.status in FINAL and p.lines_running == 0, 60.0)


async def batch_alone(api: BatchApi, batch_id: str, args: Any) -> dict[str, Any]:
    """The last batch on its own: its rate for up to ``--alone`` s, then its whole output checked."""
    probes: list[Probe] = []
    try:
        watch = api.watch(batch_id, probes, lambda p: p.status != "in_progress", time.perf_counter())
        await asyncio.wait_for(watch, args.alone)
    except TimeoutError:
        pass
    lines_per_s = line_rate(probes)
    if probes[-1].status == "in_progress":
        await stop_batch(api, batch_id)
    final = await api.wait(batch_id, lambda p: p.status in FINAL, 120.0)
    batch = await api.batch(batch_id)
    output = await api.lines(batch.get("output_file_id"))
    tokens = [int(line["response"]["body"]["usage"]["completion_tokens"]) for line in output]
    wrong = [
        line["custom_id"]
        for line in output
        if line["response"]["status_code"] != 200
        or line["response"]["body"]["choices"][0]["finish_reason"] != "length"
        or line["response"]["body"]["usage"]["completion_tokens"] != args.line_max_tokens
    ]
    errors = [e for e in await api.lines(batch.get("error_file_id")) if e.get("response") is not None]
    per_line = statistics.fmean(tokens) if tokens else None
    times = {k: batch.get(f"{k}_at") for k in ("in_progress", "finalizing", "completed", "cancelled")}
    lines, span = progress(probes)
    return {
        "window_s": span,
        "lines_in_window": lines,
        "lines_per_s": lines_per_s,
        "tokens_per_s": None if lines_per_s is None or per_line is None else lines_per_s * per_line,
        "final_status": final.status,
        "output_lines": len(output),
        "lines_wrong": len(wrong),
        "wrong_samples": wrong[:3],
        "lines_failed": len(errors),
        "error_samples": [e["response"] for e in errors[:3]],
        "completion_tokens_per_line": per_line,
        "times": times,
        "probes": [p.__dict__ for p in probes],
    }


async def scenario(stack: Stack, args: Any) -> dict[str, Any]:
    gateway = next(iter(stack.gateways.values()))
    api = BatchApi(gateway.url)
    results: dict[str, Any] = {"rounds": []}
    try:
        await warm(api, gateway.port, args)
        batch_id = ""
        extra = control_users(args)
        for number in range(args.repeat):
            log(f"  round {number + 1}/{args.repeat}: alone")
            a = await interactive(api, gateway.port, args, None)
            log(f"    TTFT p50 {fmt(a['ttft_p50_ms'], 2)} ms, {a['tokens_per_s']:.0f} tok/s, errors {a['errors']}")
            phases = {"alone": a}
            if extra:
                log(f"  round {number + 1}/{args.repeat}: beside {extra} users of plain requests")
                c = phases["plain"] = await interactive(api, gateway.port, args, None, extra)
                log(f"    TTFT p50 {fmt(c['ttft_p50_ms'], 2)} ms, {c['tokens_per_s']:.0f} tok/s, errors {c['errors']}")
            batch_id = await start_batch(api, args.lines, args.line_max_tokens)
            log(f"  round {number + 1}/{args.repeat}: while batch {batch_id} runs")
            b = await interactive(api, gateway.port, args, batch_id)
            log(f"    TTFT p50 {fmt(b['ttft_p50_ms'], 2)} ms, {b['tokens_per_s']:.0f} tok/s, errors {b['errors']}")
            results["rounds"].append(phases | {"batch": b, "batch_id": batch_id})
            if triton_failed(stack.triton):
                raise RuntimeError(f"tritonserver died in round {number + 1}")
            if number + 1 < args.repeat:
                await stop_batch(api, batch_id)
        log(f"  batch {batch_id} alone, up to {args.alone:g} s")
        results["batch_alone"] = await batch_alone(api, batch_id, args)
        k = min(args.batch_concurrency, args.batch_max_concurrency)
        log(f"  plain requests at c = {k}")
        direct = await drive_users(gateway.port, chat_body(args.line_max_tokens, False), k, 1.0, args.alone)
        results["direct"] = direct.figures() | {"concurrency": k}
    finally:
        await api.close()
    return results


def control_users(args: Any) -> int:
    """The control's users: as many as the batch can hold slots beside the interactive users, in
    the slots they leave free and within the shed bands' share (0: no control)."""
    if not args.control:
        return 0
    share = max(1, math.floor(args.slots * args.shed_share))
    return max(0, int(min(args.batch_concurrency, args.batch_max_concurrency, args.slots - args.concurrency, share)))


async def warm(api: BatchApi, port: int, args: Any) -> None:
    """Streams and a small batch end to end: first-use imports, the store's tables, the tokenizer."""
    tally = await drive_users(port, chat_body(args.max_tokens, True), args.concurrency, 0.0, 2.0)
    batch_id = await api.submit(input_file(20, args.line_max_tokens))
    done = await api.wait(batch_id, lambda p: p.status in FINAL, 60.0)
    if tally.errors or done.status != "completed" or done.completed != 20:
        raise RuntimeError(f"the gateway fails its warm-up: {tally.errors[:3]}, batch {done}")


SETTINGS = (
    "slots headroom shed_share concurrency max_tokens lines line_max_tokens batch_concurrency batch_max_concurrency "
    "poll_interval duration alone repeat control"
).split()
"""The knobs a report records."""


def run(args: Any, variants: list[Variant], report: Report) -> None:
    """``batch``: the rounds, the batch alone and the plain requests, on one stack."""
    import uvloop

    workdir = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    side = gateway_env(variants[0], args, workdir / "store.db")
    report.data["settings"] = {
        "model": MODEL,
        **{k: getattr(args, k) for k in SETTINGS},
        "gateway": side.describe(),
    }
    with Stack([side], workdir, ("--log-level=warning", *args.gateway_arg)) as stack:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            results = runner.run(scenario(stack, args))
    results["verdict"] = verdict(results["rounds"], results["direct"], results["batch_alone"])
    report.data |= results
    write(report, results, args)


# --------------------------------------------------------------------------- the report


def verdict(rounds: list[dict[str, Any]], direct: dict[str, Any], solo: dict[str, Any]) -> dict[str, Any]:
    """Each round's with / without ratios (its two windows are adjacent: a slow stretch of the
    machine falls on both), their medians, and the bar."""

    def median_ratio(key: str, phase: str = "batch") -> float | None:
        values = [x for r in rounds if phase in r and (x := ratio(r[phase][key], r["alone"][key])) is not None]
        return statistics.median(values) if values else None

    p50 = median_ratio("ttft_p50_ms")
    ran = all(r["batch"].get("batch_ran_throughout") for r in rounds)
    errors = sum(figures["errors"] for r in rounds for name, figures in r.items() if name in PHASES)
    return {
        "ttft_p50_ratio": p50,
        "plain_ttft_p50_ratio": median_ratio("ttft_p50_ms", "plain"),
        "plain_tokens_ratio": median_ratio("tokens_per_s", "plain"),
        "ttft_p99_ratio": median_ratio("ttft_p99_ms"),
        "tokens_ratio": median_ratio("tokens_per_s"),
        "batch_ran_throughout": ran,
        "errors": errors,
        "within": p50 is not None and p50 <= WITHIN and ran and errors == 0,
        "batch_over_direct": ratio(solo["tokens_per_s"], direct["tokens_per_s"]),
    }


PHASES = ("alone", "plain", "batch")
ROUND_HEADER = ["round", "phase", "requests", "TTFT p50 ms", "p99 ms", "p50 / alone", "tokens/s", "errors"]
ROUND_HEADER += ["slots held (mean)", "batch lines/s", "batch running throughout"]


def round_rows(rounds: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for number, r in enumerate(rounds, start=1):
        for phase in PHASES:
            if phase not in r:
                continue
            f = r[phase]
            rows.append(
                [
                    str(number),
                    phase,
                    str(f["requests_sent"]),
                    fmt(f["ttft_p50_ms"], 2),
                    fmt(f["ttft_p99_ms"], 2),
                    fmt(ratio(f["ttft_p50_ms"], r["alone"]["ttft_p50_ms"]), 2) if phase != "alone" else "–",
                    fmt(f["tokens_per_s"]),
                    str(f["errors"]),
                    fmt(f["slots_running_mean"]),
                    fmt(f.get("batch_lines_per_s")),
                    {True: "yes", False: "**no**"}.get(f.get("batch_ran_throughout"), "–"),
                ]
            )
    return rows


def control_line(v: dict[str, Any], extra: int) -> list[str]:
    if not extra:
        return []
    return [
        f"- the control, 'plain': {extra} users of plain requests with a line's body beside the interactive "
        f"ones (the load the batch adds, in the default band): TTFT p50 {fmt(v['plain_ttft_p50_ratio'], 2)}x, "
        f"tokens/s {fmt(v['plain_tokens_ratio'], 2)}x. What the batch costs beyond it is the batch's own; "
        "the rest is the model's, running more sequences."
    ]


def write(report: Report, results: dict[str, Any], args: Any) -> None:
    rounds, solo, direct, v = results["rounds"], results["batch_alone"], results["direct"], results["verdict"]
    report.add(
        f"## Interactive chat alone and while a batch runs: `{MODEL}`, {args.slots} slots",
        "",
        f"{args.concurrency} users stream chat back to back ({args.max_tokens} tokens, `ignore_eos`), "
        f"{args.duration:g} s windows, {args.repeat} round(s) alternated (alone, plain, batch). 'batch': a batch of "
        f"{args.lines} chat lines of {args.line_max_tokens} tokens created just before the window; the gateway "
        f"runs {args.batch_concurrency} lines at most, {args.batch_max_concurrency} of one batch, in the "
        f"sheddable band (a slot only while one is free, and beside interactive requests at most "
        f"{max(1, math.floor(args.slots * args.shed_share))}: shed share {args.shed_share:g}); "
        f"headroom {args.headroom:g}. TTFT is the client's, "
        "from writing the request to the first token; tokens/s, the completion tokens of the requests that "
        "ended in the window. `tiny-llm` steps one sequence at a time, so every slot the batch holds slows "
        "each interactive stream (the module's docstring says why that is the model's, not the gateway's).",
        "",
    )
    report.table(ROUND_HEADER, round_rows(rounds))
    report.add(
        f"- **with / without the batch (medians of the rounds' ratios): TTFT p50 {fmt(v['ttft_p50_ratio'], 2)}x, "
        f"p99 {fmt(v['ttft_p99_ratio'], 2)}x, tokens/s {fmt(v['tokens_ratio'], 2)}x; p50 within {WITHIN:g}x "
        f"with the batch running throughout and no errors: {'yes' if v['within'] else 'no'}**",
        *control_line(v, control_users(args)),
        "",
        "## The batch's throughput alone, against plain requests",
        "",
        f"The last batch after the last window, read every {PROBE_EVERY:g} s for up to {args.alone:g} s "
        f"({fmt(solo['window_s'])} s; then {solo['final_status']}); its tokens per line from its output file, "
        f"whose {solo['output_lines']} lines are all checked (the 'wrong or failed' column). Then plain "
        f"non-streaming requests with a line's body, {direct['concurrency']} users back to back, as long, "
        "through the same gateway.",
        "",
    )
    k = str(direct["concurrency"])
    report.table(
        ["side", "concurrency", "lines (requests)/s", "completion tokens/s", "ended in the window", "wrong or failed"],
        [
            ["batch", k, fmt(solo["lines_per_s"]), fmt(solo["tokens_per_s"]), str(solo["lines_in_window"]),
             str(solo["lines_wrong"] + solo["lines_failed"])],
            ["plain requests", k, fmt(direct["requests_per_s"]), fmt(direct["tokens_per_s"]),
             str(direct["requests_ended"]), str(direct["errors"])],
        ],
    )  # fmt: skip
    report.add(f"- **batch / plain requests: {fmt(v['batch_over_direct'], 2)}x the tokens/s**", "")
