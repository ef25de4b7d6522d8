"""Load clients for the gateway benchmarks. Runs in its own process; prints one JSON result.

Two clients doing the same work against the same model:

* ``floor``: ``tritonclient.grpc.aio`` straight to Triton, one ``ModelStreamInfer`` stream per
  request (exactly what the gateway does per HTTP request), one shared channel.
* ``http``: a minimal HTTP/1.1 client on ``asyncio.Protocol`` (one keep-alive connection per
  virtual user, TCP_NODELAY, chunked transfer decoding, SSE framing, ``orjson`` for the event
  payload). No httpx: on 2 shared cores a heavyweight client steals the CPU the gateway needs and
  inflates time to first token.

Each virtual user sends requests back to back. Measurement is a steady-state window
``[start + warmup, start + warmup + duration)``: tokens and completions are counted when their
timestamp falls inside it, TTFT is taken over requests *sent* inside it, and the CPU time of the
watched processes (gateway, Triton, this client) is read at the window's edges from ``/proc``.
After the window no new request starts and in-flight ones finish (they still count for errors and
content checks).

Tokens are counted by content, not by chunk: with ``token_text`` set (the firehose emits a fixed
``"tok "``), tokens = received characters / len(token_text); otherwise the usage / num_output_tokens
the server reports. One read that carries k tokens gives k inter-token samples of gap/k, so a
server that coalesces is neither rewarded nor punished.

Usage: ``python bench/loadgen.py '<json spec>'`` (the benchmark scripts build the spec).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- /proc readings


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (all threads), in seconds."""
    split = proc_cpu_split(pid)
    return None if split is None else split[0] + split[1]


def proc_cpu_split(pid: int) -> tuple[float, float] | None:
    """(utime, stime) of a process (all threads), in seconds: the kernel's share is what a relay
    pays for its sockets and wake-ups whatever language its own code is in."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def proc_thread_switches(pid: int) -> dict[str, int]:
    """Context switches by thread: ``main`` (the event loop's, whose id is the process's) and the
    others by their kernel name (gRPC's threads name themselves; Python 3.11's do not), summed per
    name. Tells a relay that wakes per token from background threads that wake on their own.
    Voluntary switches (the thread slept, so each is a wake-up) count under the name, involuntary
    ones (the thread was preempted: the cores were busy) under ``<name>, preempted``."""
    out: dict[str, int] = {}
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            name, voluntary, preempted = "?", 0, 0
            with open(f"/proc/{pid}/task/{task}/status", "rb") as handle:
                for line in handle:
                    if line.startswith(b"Name:"):
                        name = line.split(maxsplit=1)[1].strip().decode(errors="replace")
                        name = "main" if int(task) == pid else name
                    elif line.startswith(b"voluntary_ctxt_switches:"):
                        voluntary = int(line.split()[1])
                    elif line.startswith(b"nonvoluntary_ctxt_switches:"):
                        preempted = int(line.split()[1])
            out[name] = out.get(name, 0) + voluntary
            out[f"{name}, preempted"] = out.get(f"{name}, preempted", 0) + preempted
    except (OSError, ValueError):
        return {}
    return out


def proc_tree(pid: int) -> list[int]:
    """A process and its descendants (tritonserver runs one python-backend stub process per model:
    a parent's utime/stime does not include live children, so they are read one by one)."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    todo.extend(int(c) for c in handle.read().split())
        except OSError:
            pass
    return out


def tree_cpu_seconds(pid: int) -> float | None:
    values = [proc_cpu_seconds(p) for p in proc_tree(pid)]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def proc_rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# --------------------------------------------------------------------------- per-request record


@dataclass
class Record:
    sent: float
    first: float | None = None
    last: float | None = None
    done: float | None = None
    chars: int = 0
    tokens_reported: int = 0
    finish_reason: str | None = None
    saw_done: bool = False
    error: str | None = None
    content: list[str] | None = None


@dataclass
class Window:
    start: float
    end: float
    tokens: float = 0.0
    completed: int = 0
    ttft: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)

    def arrival(self, record: Record, now: float, tokens: float) -> None:
        """Account ``tokens`` that arrived at ``now`` for ``record``."""
        if tokens <= 0:
            return
        if record.last is None and self.start <= record.sent < self.end:
            self.ttft.append(now - record.sent)  # requests sent in the window, whenever they answer
        if self.start <= now < self.end:
            self.tokens += tokens
            if record.last is not None:
                gap = (now - record.last) / tokens
                if tokens == 1:
                    self.gaps.append(gap)
                else:
                    self.gaps.extend([gap] * int(round(tokens)))
        if record.first is None:
            record.first = now
        record.last = now


def floor_inputs(grpcclient: Any, prompt: str, sampling: dict[str, Any], stream: bool = True) -> list[Any]:
    """The floor's ``ModelStreamInfer`` inputs (``grpcclient``: ``tritonclient.grpc.aio``): what the
    gateway's vLLM contract sends for one sequence, with the prompt as it is (no template)."""
    import numpy as np

    def tensor(name: str, value: Any, dtype: str) -> Any:
        item = grpcclient.InferInput(name, [1], dtype)
        item.set_data_from_numpy(np.array([value], dtype=np.object_ if dtype == "BYTES" else np.bool_))
        return item

    return [
        tensor("text_input", prompt.encode(), "BYTES"),
        tensor("stream", stream, "BOOL"),
        tensor("sampling_parameters", json.dumps(sampling).encode(), "BYTES"),
        tensor("exclude_input_in_output", True, "BOOL"),
        tensor("return_finish_reason", True, "BOOL"),
        tensor("return_num_input_tokens", True, "BOOL"),
        tensor("return_num_output_tokens", True, "BOOL"),
    ]


# --------------------------------------------------------------------------- HTTP/1.1 client


class HttpError(Exception):
    pass


class SseProtocol(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.state = "idle"
        self.chunk_left = 0
        self.chunked = False
        self.content_length = -1
        self.body_read = 0
        self.status = 0
        self.keep_alive = True
        self.sse_buf = b""
        self.body = bytearray()
        self.streaming = True
        self.waiter: asyncio.Future[None] | None = None
        self.record: Record | None = None
        self.window: Window | None = None
        self.token_chars = 0
        self.keep_content = False
        self.closed = False

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(HttpError(f"connection lost in state {self.state}: {exc}"))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self.buf += data
        try:
            self._parse(now)
        except Exception as exc:  # noqa: BLE001 - surfaced to the request
            self._finish(exc)

    # request
    def request(
        self, payload: bytes, record: Record, window: Window, streaming: bool, token_chars: int, keep_content: bool
    ) -> asyncio.Future[None]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.record, self.window, self.streaming = record, window, streaming
        self.token_chars, self.keep_content = token_chars, keep_content
        self.state = "headers"
        self.buf = b""
        self.sse_buf = b""
        self.body = bytearray()
        record.sent = time.perf_counter()
        self.transport.write(payload)
        return self.waiter

    def _finish(self, exc: Exception | None = None) -> None:
        self.state = "idle"
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    def _parse(self, now: float) -> None:
        while True:
            if self.state == "headers":
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = self.buf[:end].decode("latin-1").split("\r\n")
                self.buf = self.buf[end + 4 :]
                self.status = int(head[0].split(" ", 2)[1])
                self.chunked, self.content_length, self.keep_alive = False, -1, True
                for line in head[1:]:
                    name, _, value = line.partition(":")
                    name = name.strip().lower()
                    value = value.strip().lower()
                    if name == "transfer-encoding" and "chunked" in value:
                        self.chunked = True
                    elif name == "content-length":
                        self.content_length = int(value)
                    elif name == "connection" and value == "close":
                        self.keep_alive = False
                self.body_read = 0
                self.state = "size" if self.chunked else "length"
            elif self.state == "size":
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return
                size = int(self.buf[:end].split(b";", 1)[0], 16)
                self.buf = self.buf[end + 2 :]
                if size == 0:
                    self.state = "trailer"
                else:
                    self.chunk_left = size
                    self.state = "data"
            elif self.state == "data":
                if not self.buf:
                    return
                piece = self.buf[: self.chunk_left]
                self.buf = self.buf[len(piece) :]
                self.chunk_left -= len(piece)
                self._body(piece, now)
                if self.chunk_left == 0:
                    self.state = "crlf"
            elif self.state == "crlf":
                if len(self.buf) < 2:
                    return
                self.buf = self.buf[2:]
                self.state = "size"
            elif self.state == "trailer":
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return
                line = self.buf[:end]
                self.buf = self.buf[end + 2 :]
                if not line:
                    self._complete(now)
                    return
            elif self.state == "length":
                need = self.content_length - self.body_read
                piece = self.buf[:need] if self.content_length >= 0 else self.buf
                self.buf = self.buf[len(piece) :]
                self.body_read += len(piece)
                self._body(piece, now)
                if self.content_length >= 0 and self.body_read >= self.content_length:
                    self._complete(now)
                return
            else:
                return

    def _body(self, piece: bytes, now: float) -> None:
        if self.status != 200 or not self.streaming:
            self.body += piece
            return
        self.sse_buf += piece
        if b"\n\n" not in self.sse_buf:
            return
        *events, self.sse_buf = self.sse_buf.split(b"\n\n")
        record = self.record
        assert record is not None and self.window is not None
        chars = 0
        reported = 0
        for event in events:
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue  # comments (pings), event names
                data = line[5:].strip()
                if data == b"[DONE]":
                    record.saw_done = True
                    continue
                obj = orjson.loads(data)
                if "error" in obj:
                    record.error = str(obj["error"])[:300]
                    continue
                choices = obj.get("choices") or ()
                for choice in choices:
                    delta = choice.get("delta")
                    text = delta.get("content") if delta is not None else choice.get("text")
                    if text:
                        chars += len(text)
                        if self.keep_content:
                            assert record.content is not None
                            record.content.append(text)
                    if choice.get("finish_reason"):
                        record.finish_reason = choice["finish_reason"]
                usage = obj.get("usage")
                if usage:
                    record.tokens_reported = int(usage.get("completion_tokens") or 0)
                elif not self.token_chars and choices:
                    # No fixed token text: one content chunk ~ one token until usage arrives.
                    reported += sum(1 for c in choices if (c.get("delta") or {}).get("content") or c.get("text"))
        if chars:
            record.chars += chars
            tokens = chars / self.token_chars if self.token_chars else reported
            self.window.arrival(record, now, tokens)

    def _complete(self, now: float) -> None:
        record = self.record
        assert record is not None
        record.done = now
        if self.status != 200:
            self._finish(HttpError(f"HTTP {self.status}: {bytes(self.body[:300]).decode(errors='replace')}"))
            return
        if not self.streaming:
            obj = orjson.loads(bytes(self.body))
            choice = obj["choices"][0]
            text = choice.get("text")
            if text is None:
                text = (choice.get("message") or {}).get("content") or ""
            record.chars = len(text)
            record.finish_reason = choice.get("finish_reason")
            record.tokens_reported = int((obj.get("usage") or {}).get("completion_tokens") or 0)
            record.saw_done = True
            if self.keep_content:
                record.content = [text]
            assert self.window is not None
            tokens = record.chars / self.token_chars if self.token_chars else record.tokens_reported
            self.window.arrival(record, now, tokens)
        if not self.keep_alive and self.transport is not None:
            self.transport.close()
        self._finish(None)


# --------------------------------------------------------------------------- runners


class Runner:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.records: list[Record] = []
        self.errors: list[str] = []
        self.error_count = 0
        self.unfinished = 0

    def new_record(self) -> Record:
        record = Record(sent=time.perf_counter())
        if self.spec.get("check_content"):
            record.content = []
        self.records.append(record)
        return record

    def fail(self, record: Record, message: str) -> None:
        record.error = message
        self.error_count += 1
        if len(self.errors) < 5:
            self.errors.append(message[:300])

    # ---- HTTP
    def http_payload(self) -> bytes:
        spec = self.spec
        body: dict[str, Any] = {"model": spec["model"], "max_tokens": spec["max_tokens"], "stream": spec["stream"]}
        if spec.get("path", "/v1/completions").endswith("chat/completions"):
            body["messages"] = [{"role": "user", "content": spec["prompt"]}]
        else:
            body["prompt"] = spec["prompt"]
        if spec["stream"]:
            body["stream_options"] = {"include_usage": True}
        body.update(spec.get("extra") or {})
        raw = orjson.dumps(body)
        head = (
            f"POST {spec.get('path', '/v1/completions')} HTTP/1.1\r\n"
            f"Host: {spec['host']}:{spec['port']}\r\n"
            "Content-Type: application/json\r\n"
            "Accept: text/event-stream\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n"
        )
        return head.encode() + raw

    async def http_user(self, window: Window, stop_at: float) -> None:
        loop = asyncio.get_running_loop()
        spec = self.spec
        payload = self.http_payload()
        token_chars = len(spec.get("token_text") or "")
        keep = bool(spec.get("check_content"))
        proto: SseProtocol | None = None
        while time.perf_counter() < stop_at and not self.stopping:
            if proto is None or proto.closed:
                _, proto = await loop.create_connection(SseProtocol, spec["host"], spec["port"])
            record = self.new_record()
            try:
                await proto.request(payload, record, window, spec["stream"], token_chars, keep)
            except HttpError as exc:
                self.fail(record, str(exc))
                if proto.transport is not None:
                    proto.transport.close()
                proto = None
                await asyncio.sleep(0.05)
                continue
            self.check(record)
        if proto is not None and proto.transport is not None:
            proto.transport.close()

    def check(self, record: Record) -> None:
        spec = self.spec
        if record.error:
            self.fail(record, record.error)
            return
        expect = spec.get("expect_tokens")
        if spec["stream"] and not record.saw_done:
            self.fail(record, "stream ended without [DONE]")
        elif expect and spec.get("token_text") and record.chars != expect * len(spec["token_text"]):
            self.fail(record, f"content length {record.chars} != {expect * len(spec['token_text'])}")
        elif expect and record.tokens_reported and record.tokens_reported != expect:
            self.fail(record, f"usage.completion_tokens {record.tokens_reported} != {expect}")
        elif spec.get("expect_finish") and record.finish_reason != spec["expect_finish"]:
            self.fail(record, f"finish_reason {record.finish_reason!r} != {spec['expect_finish']!r}")
        elif record.content is not None and spec.get("token_text"):
            text = "".join(record.content)
            if text != spec["token_text"] * expect:
                self.fail(record, f"corrupted content: {text[:80]!r}")

    # ---- floor (gRPC straight to Triton)
    async def floor_users(self, window: Window, stop_at: float) -> None:
        import tritonclient.grpc.aio as grpcclient

        spec = self.spec
        client = grpcclient.InferenceServerClient(spec["grpc_url"])
        sampling = {"max_tokens": spec["max_tokens"], **(spec.get("sampling") or {})}
        inputs = floor_inputs(grpcclient, spec["prompt"], sampling, stream=spec["stream"])
        token_chars = len(spec.get("token_text") or "")
        model = spec["model"]

        async def one_request() -> dict[str, Any]:
            yield {"model_name": model, "inputs": inputs}

        async def user() -> None:
            while time.perf_counter() < stop_at and not self.stopping:
                record = self.new_record()
                record.sent = time.perf_counter()
                try:
                    async for result, error in client.stream_infer(one_request()):
                        now = time.perf_counter()
                        if error is not None:
                            record.error = str(error)
                            break
                        response = result.get_response()
                        text_bytes = 0
                        tokens = 0
                        for index, output in enumerate(response.outputs):
                            raw = response.raw_output_contents[index]
                            if output.name == "text_output":
                                text_bytes = len(raw) - 4  # one element: uint32 length + bytes
                                if record.content is not None:
                                    record.content.append(raw[4:].decode())
                            elif output.name == "num_output_tokens":
                                tokens = int.from_bytes(raw[:4], "little")
                                record.tokens_reported += tokens
                            elif output.name == "finish_reason":
                                reason = raw[4:].decode()
                                if reason != "None":
                                    record.finish_reason = reason
                        record.chars += text_bytes
                        window.arrival(record, now, text_bytes / token_chars if token_chars else tokens)
                    record.saw_done = record.finish_reason is not None
                except Exception as exc:  # noqa: BLE001
                    record.error = f"{type(exc).__name__}: {exc}"
                record.done = time.perf_counter()
                self.check(record)

        try:
            await asyncio.gather(*(user() for _ in range(spec["concurrency"])))
        finally:
            await client.close()

    # ---- orchestration
    async def run(self) -> dict[str, Any]:
        spec = self.spec
        self.stopping = False
        now = time.perf_counter()
        window = Window(start=now + spec["warmup"], end=now + spec["warmup"] + spec["duration"])
        watch = {name: pid for name, pid in (spec.get("watch_pids") or {}).items() if pid}
        tree_names = set(spec.get("watch_trees") or ("triton",))  # tritonserver + its model stubs
        cpu: dict[str, dict[str, float | None]] = {name: {} for name in [*watch, "client"]}
        kernel: dict[str, dict[str, tuple[float, float] | None]] = {name: {} for name in watch}
        switches: dict[str, dict[str, int | None]] = {name: {} for name in watch}
        by_thread: dict[str, dict[str, dict[str, int]]] = {name: {} for name in watch}
        rss_samples: dict[str, list[int]] = {name: [] for name in watch}

        def mark(edge: str) -> None:
            for name, pid in watch.items():
                cpu[name][edge] = tree_cpu_seconds(pid) if name in tree_names else proc_cpu_seconds(pid)
                if name not in tree_names:
                    kernel[name][edge] = proc_cpu_split(pid)
                    threads = by_thread[name][edge] = proc_thread_switches(pid)
                    # All threads, voluntary and preempted: a relay that sleeps between tokens
                    # switches once per token.
                    switches[name][edge] = sum(threads.values()) if threads else None
                rss = proc_rss_bytes(pid)
                if rss is not None:
                    rss_samples[name].append(rss)
            cpu["client"][edge] = time.process_time()

        async def sampler() -> None:
            await asyncio.sleep(max(0.0, window.start - time.perf_counter()))
            mark("start")
            while time.perf_counter() < window.end:
                await asyncio.sleep(min(0.25, max(0.0, window.end - time.perf_counter())))
                for name, pid in watch.items():
                    rss = proc_rss_bytes(pid)
                    if rss is not None:
                        rss_samples[name].append(rss)
            mark("end")

        sample_task = asyncio.create_task(sampler())
        if spec["target"] == "floor":
            users = asyncio.create_task(self.floor_users(window, window.end))
        else:
            users = asyncio.ensure_future(
                asyncio.gather(*(self.http_user(window, window.end) for _ in range(spec["concurrency"])))
            )
        await sample_task
        drain = spec.get("drain_timeout", 60.0)
        try:
            await asyncio.wait_for(asyncio.shield(users), timeout=drain)
        except asyncio.TimeoutError:
            self.stopping = True
            self.unfinished = sum(1 for r in self.records if r.done is None and r.error is None)
            users.cancel()
            try:
                await users
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        except Exception as exc:  # noqa: BLE001
            self.fail(Record(sent=0.0), f"client crashed: {type(exc).__name__}: {exc}")

        duration = window.end - window.start
        completed = sum(
            1 for r in self.records if r.done is not None and r.error is None and window.start <= r.done < window.end
        )
        tokens_total = sum(
            (r.chars / len(spec["token_text"])) if spec.get("token_text") else r.tokens_reported
            for r in self.records
            if r.error is None and r.done is not None
        )
        result: dict[str, Any] = {
            "target": spec["target"],
            "concurrency": spec["concurrency"],
            "stream": spec["stream"],
            "window_s": duration,
            "tokens_per_s": window.tokens / duration,
            "requests_per_s": completed / duration,
            "ttft_p50_ms": _ms(percentile(window.ttft, 0.5)),
            "ttft_p99_ms": _ms(percentile(window.ttft, 0.99)),
            "gap_p50_ms": _ms(percentile(window.gaps, 0.5)),
            "gap_p99_ms": _ms(percentile(window.gaps, 0.99)),
            "requests_total": len(self.records),
            "requests_ok": sum(1 for r in self.records if r.error is None and r.done is not None),
            "errors": self.error_count,
            "error_samples": self.errors,
            "unfinished": self.unfinished,
            "tokens_total": tokens_total,
            "window_tokens": window.tokens,
        }
        for name in cpu:
            start, end = cpu[name].get("start"), cpu[name].get("end")
            if start is not None and end is not None and window.tokens:
                result[f"{name}_cpu_s"] = end - start
                result[f"{name}_cpu_us_per_token"] = (end - start) / window.tokens * 1e6
        for name in kernel:
            split_start, split_end = kernel[name].get("start"), kernel[name].get("end")
            if split_start is not None and split_end is not None and window.tokens:
                result[f"{name}_sys_us_per_token"] = (split_end[1] - split_start[1]) / window.tokens * 1e6
            count_start, count_end = switches[name].get("start"), switches[name].get("end")
            if count_start is not None and count_end is not None and window.tokens:
                result[f"{name}_switches_per_token"] = (count_end - count_start) / window.tokens
            threads_start, threads_end = by_thread[name].get("start"), by_thread[name].get("end")
            if threads_start and threads_end and window.tokens:
                result[f"{name}_switches_per_token_by_thread"] = {
                    thread: (count - threads_start.get(thread, 0)) / window.tokens
                    for thread, count in sorted(threads_end.items())
                    if count != threads_start.get(thread, 0)
                }
        for name, samples in rss_samples.items():
            if samples:
                result[f"{name}_rss_mb_end"] = samples[-1] / 2**20
                result[f"{name}_rss_mb_peak"] = max(samples) / 2**20
        return result


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def read_spec(argument: str) -> dict[str, Any]:
    """The JSON spec, or ``@path`` of a file holding it (a spec with a large prompt is over the
    kernel's limit for one command-line argument, 128 KiB)."""
    if argument.startswith("@"):
        with open(argument[1:], encoding="utf-8") as handle:
            return dict(json.load(handle))
    return dict(json.loads(argument))


def main() -> None:
    spec = read_spec(sys.argv[1])
    loop_factory = None
    if spec["target"] == "http" and spec.get("uvloop", True):
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:
            pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        result = runner.run(Runner(spec).run())
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
