"""The load client: one process per run, a JSON spec in, one JSON result out.

``python -m bench.loadgen @spec.json``. Each run is its own process, so the side measured
(floor or a gateway) and the client are the only busy processes beside Triton, and the client's
CPU is read apart. Two clients do the same work against the same model:

* ``floor``: ``tritonclient.grpc.aio`` straight to Triton, one ``ModelStreamInfer`` stream per
  request with the inputs the gateway's vLLM contract sends (the prompt as it is, no template),
  one shared channel: what a Triton user without a gateway gets.
* ``http``: a minimal HTTP/1.1 client on ``asyncio.Protocol`` and httptools' C parser, one
  keep-alive connection per virtual user, orjson per SSE event. It costs a fraction of the
  floor's client per token; a heavier one (httpx) steals the CPU the gateway needs on 2 cores.

Every virtual user sends requests back to back. Figures come from a steady-state window
``[warmup, warmup + duration)``: tokens count when they arrive in it, TTFT over requests *sent*
in it, CPU of the watched processes read from ``/proc`` at its edges. After it no request
starts; streams still running after ``drain_timeout`` are cancelled. Every request is checked
(token count, ``[DONE]``, usage, finish reason; with ``check_content`` the exact text).

Tokens are counted by content (characters / len(``token_text``)), and a read that brings k
tokens gives k inter-token gaps of gap / k, so a server that coalesces is neither rewarded nor
punished.

``target: "stall"`` runs the other client of ``prompts``: a paced stream read alone, then
while large prompts arrive; its gaps are between reads, so a stall is one long gap.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httptools
import orjson

from bench.procstat import percentile, rss_bytes, tree_cpu_seconds


@dataclass
class Record:
    """One request as the client saw it."""

    sent: float
    last: float | None = None
    done: float | None = None
    chars: int = 0
    usage_tokens: int = 0
    finish_reason: str | None = None
    saw_done: bool = False
    error: str | None = None
    content: list[str] | None = None


OnTokens = Callable[[Record, float, float], None]
"""Called with the record, the arrival time and the tokens that arrived."""


@dataclass
class Window:
    """The measured window: tokens, completions, TTFT and gaps that fall in it."""

    start: float
    end: float
    tokens: float = 0.0
    ttft: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)

    def arrival(self, record: Record, now: float, tokens: float) -> None:
        if tokens <= 0:
            return
        if record.last is None and self.start <= record.sent < self.end:
            self.ttft.append(now - record.sent)
        if self.start <= now < self.end:
            self.tokens += tokens
            if record.last is not None:
                self.gaps.extend([(now - record.last) / tokens] * max(1, round(tokens)))
        record.last = now


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


@dataclass
class Timeline:
    """The window's figures every ``step`` seconds (``spec["timeline"]``; 0: none), for ``soak``'s
    plot over time. Read from the window's running totals at the sampler's ticks, so the per-token
    path does no more work; a point's TTFT is over the first tokens that arrived since the last."""

    window: Window
    step: float
    points: list[dict[str, Any]] = field(default_factory=list)
    last: float | None = None
    tokens: float = 0.0
    ttfts: int = 0

    def sample(self, rss: dict[str, list[int]], errors: int) -> None:
        now = time.perf_counter()
        last = self.window.start if self.last is None else self.last
        if not self.step or now - last < self.step:
            return
        window, elapsed, self.last = self.window, now - last, now
        ttft = window.ttft[self.ttfts :]
        self.points.append(
            {
                "t_s": round(now - window.start, 3),
                "tokens_per_s": (window.tokens - self.tokens) / elapsed,
                "ttft_p50_ms": ms(percentile(ttft, 0.5)),
                "ttft_p95_ms": ms(percentile(ttft, 0.95)),
                "rss_mb": {name: samples[-1] / 2**20 for name, samples in rss.items() if samples},
                "errors": errors,
            }
        )
        self.tokens, self.ttfts = window.tokens, len(window.ttft)


# --------------------------------------------------------------------------- HTTP/1.1 + SSE


def http_payload(spec: dict[str, Any], path: str, model: str, prompt: str, max_tokens: int, stream: bool) -> bytes:
    """One request's bytes: a chat body with one user message, or a completions body."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": stream}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stream:
        body["stream_options"] = {"include_usage": True}
    raw = orjson.dumps(body)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {spec['host']}:{spec['port']}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(raw)}\r\n\r\n"
    )
    return head.encode() + raw


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; httptools undoes the chunking."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.now = 0.0
        self.status = 0
        self.sse = b""
        self.body = bytearray()
        self.record = Record(0.0)
        self.on_tokens: OnTokens = lambda record, now, tokens: None
        self.stream = True
        self.token_chars = 4

    @classmethod
    async def open(cls, host: str, port: int) -> HttpConnection:
        _, connection = await asyncio.get_running_loop().create_connection(cls, host, port)
        return connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._finish(ConnectionError(f"connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        self.now = time.perf_counter()
        try:
            self.parser.feed_data(data)
        except Exception as exc:  # noqa: BLE001 - a malformed answer fails its request
            self._finish(exc)

    async def request(
        self, payload: bytes, record: Record, on_tokens: OnTokens, stream: bool, token_chars: int
    ) -> None:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.record, self.on_tokens, self.stream, self.token_chars = record, on_tokens, stream, token_chars
        self.sse, self.body = b"", bytearray()
        record.sent = time.perf_counter()
        self.transport.write(payload)
        await self.waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # httptools callbacks
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, piece: bytes) -> None:
        if self.status != 200 or not self.stream:
            self.body += piece
            return
        self.sse += piece
        if b"\n\n" not in self.sse:
            return
        *events, self.sse = self.sse.split(b"\n\n")
        before = self.record.chars
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self._event(line[5:].strip())
        if self.record.chars > before:
            self.on_tokens(self.record, self.now, (self.record.chars - before) / self.token_chars)

    def _event(self, data: bytes) -> None:
        record = self.record
        if data == b"[DONE]":
            record.saw_done = True
            return
        obj = orjson.loads(data)
        if "error" in obj:
            record.error = str(obj["error"])[:300]
        for choice in obj.get("choices") or ():
            delta = choice.get("delta")
            text = delta.get("content") if delta is not None else choice.get("text")
            if text:
                record.chars += len(text)
                if record.content is not None:
                    record.content.append(text)
            record.finish_reason = choice.get("finish_reason") or record.finish_reason
        if obj.get("usage"):
            record.usage_tokens = int(obj["usage"].get("completion_tokens") or 0)

    def on_message_complete(self) -> None:
        record = self.record
        record.done = self.now
        if self.status != 200:
            self._finish(RuntimeError(f"HTTP {self.status}: {bytes(self.body[:300]).decode(errors='replace')}"))
            return
        if not self.stream:
            obj = orjson.loads(bytes(self.body))
            choice = obj["choices"][0]
            text = choice.get("text") if "text" in choice else (choice.get("message") or {}).get("content") or ""
            record.chars, record.finish_reason, record.saw_done = len(text), choice.get("finish_reason"), True
            record.usage_tokens = int((obj.get("usage") or {}).get("completion_tokens") or 0)
            if record.content is not None:
                record.content.append(text)
            self.on_tokens(record, self.now, record.chars / self.token_chars)
        self._finish(None)

    def _finish(self, exc: BaseException | None) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None) if exc is None else waiter.set_exception(exc)


# --------------------------------------------------------------------------- the floor


class Floor:
    """``tritonclient.grpc.aio`` straight to Triton: one ``ModelStreamInfer`` stream per request."""

    def __init__(self, grpc_url: str) -> None:
        import tritonclient.grpc.aio as grpcclient

        self.grpc = grpcclient
        self.client = grpcclient.InferenceServerClient(grpc_url)

    def inputs(self, prompt: str, max_tokens: int, stream: bool) -> list[Any]:
        """What the gateway's vLLM contract sends for one sequence."""
        import numpy as np

        def tensor(name: str, value: Any, dtype: str) -> Any:
            item = self.grpc.InferInput(name, [1], dtype)
            item.set_data_from_numpy(np.array([value], dtype=np.object_ if dtype == "BYTES" else np.bool_))
            return item

        sampling = json.dumps({"max_tokens": max_tokens}).encode()
        flags = (
            "exclude_input_in_output",
            "return_finish_reason",
            "return_num_input_tokens",
            "return_num_output_tokens",
        )
        return [
            tensor("text_input", prompt.encode(), "BYTES"),
            tensor("stream", stream, "BOOL"),
            tensor("sampling_parameters", sampling, "BYTES"),
            *(tensor(flag, True, "BOOL") for flag in flags),
        ]

    async def call(self, model: str, inputs: list[Any], record: Record, on_tokens: OnTokens, token_chars: int) -> None:
        async def one() -> Any:
            yield {"model_name": model, "inputs": inputs}

        record.sent = time.perf_counter()
        async for result, error in self.client.stream_infer(one()):
            now = time.perf_counter()
            if error is not None:
                raise RuntimeError(str(error))
            response = result.get_response()
            for index, output in enumerate(response.outputs):
                raw = response.raw_output_contents[index]
                if output.name == "text_output" and len(raw) > 4:
                    record.chars += len(raw) - 4  # one element: uint32 length, then the bytes
                    if record.content is not None:
                        record.content.append(raw[4:].decode())
                    on_tokens(record, now, (len(raw) - 4) / token_chars)
                elif output.name == "num_output_tokens":
                    record.usage_tokens += int.from_bytes(raw[:4], "little")
                elif output.name == "finish_reason" and raw[4:] != b"None":
                    record.finish_reason = raw[4:].decode()
        record.saw_done = record.finish_reason is not None
        record.done = time.perf_counter()

    async def close(self) -> None:
        await self.client.close()


# --------------------------------------------------------------------------- a load run


class Run:
    """``concurrency`` users sending requests back to back against one side."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.records: list[Record] = []
        self.errors: list[str] = []
        self.error_count = 0
        self.stopping = False
        self.token_chars = len(spec.get("token_text") or "tok ")

    def new_record(self) -> Record:
        record = Record(time.perf_counter(), content=[] if self.spec.get("check_content") else None)
        self.records.append(record)
        return record

    def fail(self, record: Record, message: str) -> None:
        record.error = message
        self.error_count += 1
        if len(self.errors) < 5:
            self.errors.append(message[:300])

    def check(self, record: Record) -> None:
        """Every request is checked; a wrong one is an error, never a slow success."""
        spec, expect = self.spec, self.spec.get("expect_tokens")
        if record.error:
            self.fail(record, record.error)
        elif not record.saw_done:
            self.fail(record, "no [DONE] (or no final response)")
        elif expect and record.chars != expect * self.token_chars:
            self.fail(record, f"{record.chars} characters, expected {expect * self.token_chars}")
        elif expect and record.usage_tokens and record.usage_tokens != expect:
            self.fail(record, f"usage says {record.usage_tokens} tokens, expected {expect}")
        elif spec.get("expect_finish") and record.finish_reason != spec["expect_finish"]:
            self.fail(record, f"finish_reason {record.finish_reason!r}")
        elif record.content is not None and "".join(record.content) != (spec.get("token_text") or "") * (expect or 0):
            self.fail(record, f"corrupted content: {''.join(record.content)[:80]!r}")

    async def http_user(self, window: Window) -> None:
        spec = self.spec
        payload = http_payload(spec, spec["path"], spec["model"], spec["prompt"], spec["max_tokens"], spec["stream"])
        connection: HttpConnection | None = None
        while time.perf_counter() < window.end and not self.stopping:
            if connection is None or connection.closed:
                connection = await HttpConnection.open(spec["host"], spec["port"])
            record = self.new_record()
            try:
                await connection.request(payload, record, window.arrival, spec["stream"], self.token_chars)
            except Exception as exc:  # noqa: BLE001 - counted, and the user goes on
                record.error = record.error or f"{type(exc).__name__}: {exc}"
                connection.close()
                connection = None
                await asyncio.sleep(0.05)
            self.check(record)
        if connection is not None:
            connection.close()

    async def floor_users(self, window: Window) -> None:
        spec = self.spec
        floor = Floor(spec["grpc_url"])
        inputs = floor.inputs(spec["prompt"], spec["max_tokens"], spec["stream"])

        async def user() -> None:
            while time.perf_counter() < window.end and not self.stopping:
                record = self.new_record()
                try:
                    await floor.call(spec["model"], inputs, record, window.arrival, self.token_chars)
                except Exception as exc:  # noqa: BLE001
                    record.error = f"{type(exc).__name__}: {exc}"
                self.check(record)

        try:
            await asyncio.gather(*(user() for _ in range(spec["concurrency"])))
        finally:
            await floor.close()

    async def run(self) -> dict[str, Any]:
        spec = self.spec
        now = time.perf_counter()
        window = Window(now + spec["warmup"], now + spec["warmup"] + spec["duration"])
        watch: dict[str, int] = {name: pid for name, pid in (spec.get("watch") or {}).items() if pid}
        cpu: dict[str, list[float | None]] = {name: [] for name in [*watch, "client"]}
        rss: dict[str, list[int]] = {name: [] for name in watch}
        timeline = Timeline(window, float(spec.get("timeline") or 0.0))

        def mark() -> None:
            for name, pid in watch.items():
                cpu[name].append(tree_cpu_seconds(pid))
            cpu["client"].append(time.process_time())

        async def sample() -> None:
            await asyncio.sleep(max(0.0, window.start - time.perf_counter()))
            mark()
            while time.perf_counter() < window.end:
                await asyncio.sleep(min(0.25, max(0.0, window.end - time.perf_counter())))
                for name, pid in watch.items():
                    rss[name].append(rss_bytes(pid) or 0)
                timeline.sample(rss, self.error_count)
            mark()

        sampler = asyncio.create_task(sample())
        users: asyncio.Future[Any]
        if spec["target"] == "floor":
            users = asyncio.ensure_future(self.floor_users(window))
        else:
            users = asyncio.gather(*(self.http_user(window) for _ in range(spec["concurrency"])))
        await sampler
        unfinished = 0
        try:
            await asyncio.wait_for(asyncio.shield(users), timeout=spec.get("drain_timeout", 60.0))
        except TimeoutError:
            self.stopping = True
            unfinished = sum(1 for r in self.records if r.done is None and r.error is None)
            users.cancel()
            await asyncio.gather(users, return_exceptions=True)
        out = self.result(window, cpu, rss, unfinished)
        if timeline.step:
            out["timeline"] = timeline.points
        return out

    def result(
        self, window: Window, cpu: dict[str, list[float | None]], rss: dict[str, list[int]], unfinished: int
    ) -> dict[str, Any]:
        duration = window.end - window.start
        done = [r for r in self.records if r.done is not None and r.error is None]
        out: dict[str, Any] = {
            "target": self.spec["target"],
            "concurrency": self.spec["concurrency"],
            "tokens_per_s": window.tokens / duration,
            "requests_per_s": sum(1 for r in done if window.start <= (r.done or 0) < window.end) / duration,
            "ttft_p50_ms": ms(percentile(window.ttft, 0.5)),
            "ttft_p95_ms": ms(percentile(window.ttft, 0.95)),
            "ttft_p99_ms": ms(percentile(window.ttft, 0.99)),
            "gap_p50_ms": ms(percentile(window.gaps, 0.5)),
            "gap_p99_ms": ms(percentile(window.gaps, 0.99)),
            "requests": len(self.records),
            "requests_ok": len(done),
            "errors": self.error_count,
            "error_samples": self.errors,
            "unfinished": unfinished,
        }
        for name, marks in cpu.items():
            if len(marks) == 2 and None not in marks and window.tokens:
                out[f"{name}_cpu_us_per_token"] = (marks[1] - marks[0]) / window.tokens * 1e6  # type: ignore[operator]
        for name, samples in rss.items():
            if samples:
                out[f"{name}_rss_mb_peak"], out[f"{name}_rss_mb_end"] = max(samples) / 2**20, samples[-1] / 2**20
        return out


# --------------------------------------------------------------------------- the stall client


async def stall(spec: dict[str, Any]) -> dict[str, Any]:
    """Does a running stream keep its pace while large prompts arrive? A ``scripted`` stream
    paced at ``delay`` is read alone, then while ``big_count`` chat requests with a large prompt
    arrive ``big_interval`` apart; its gaps while they are in flight are compared with its idle
    ones. ``side: floor`` does the same straight to Triton (Triton's own share)."""
    floor = Floor(spec["grpc_url"]) if spec["side"] == "floor" else None

    async def request(model: str, path: str, prompt: str, tokens: int, stream: bool, on_tokens: OnTokens) -> Record:
        record = Record(time.perf_counter())
        if floor is not None:
            await floor.call(model, floor.inputs(prompt, tokens, stream), record, on_tokens, 4)
        else:
            connection = await HttpConnection.open(spec["host"], spec["port"])
            try:
                await connection.request(
                    http_payload(spec, path, model, prompt, tokens, stream), record, on_tokens, stream, 4
                )
            finally:
                connection.close()
        if record.chars != tokens * 4:
            raise RuntimeError(f"{model} answered {record.chars // 4} of {tokens} tokens")
        return record

    def paced(gaps: list[tuple[float, float]]) -> Any:
        def on_tokens(record: Record, now: float, tokens: float) -> None:
            if record.last is not None:
                gaps.append((now, now - record.last))
            record.last = now

        return request("scripted", "/v1/completions", spec["stream_prompt"], spec["stream_tokens"], True, on_tokens)

    async def big() -> float:
        record = await request("firehose", spec["big_path"], spec["big_prompt"], 16, False, lambda *_: None)
        return time.perf_counter() - record.sent

    try:
        await big()  # first-use costs of a large prompt
        idle: list[tuple[float, float]] = []
        await paced(idle)
        loaded: list[tuple[float, float]] = []
        stream = asyncio.ensure_future(paced(loaded))
        await asyncio.sleep(0.5)
        first = time.perf_counter()
        bigs = []
        for _ in range(spec["big_count"]):
            bigs.append(asyncio.ensure_future(big()))
            await asyncio.sleep(spec["big_interval"])
        latencies = await asyncio.gather(*bigs)
        last = time.perf_counter()
        await stream
    finally:
        if floor is not None:
            await floor.close()
    during = [gap for when, gap in loaded if first <= when <= last]
    return {
        "idle_gap_p99_ms": ms(percentile([gap for _, gap in idle], 0.99)),
        "loaded_gap_p99_ms": ms(percentile(during, 0.99)),
        "loaded_gap_max_ms": ms(max(during)) if during else None,
        "big_latency_p50_ms": ms(percentile(list(latencies), 0.5)),
    }


def main() -> None:
    argument = sys.argv[1]
    if argument.startswith("@"):
        with open(argument[1:], encoding="utf-8") as handle:
            spec = json.load(handle)
    else:
        spec = json.loads(argument)
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        result = runner.run(stall(spec) if spec["target"] == "stall" else Run(spec).run())
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
