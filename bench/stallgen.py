"""Stall client for ``big_prompts.py``: does one running stream keep its pace while large prompts arrive?

Runs in its own process (like ``loadgen.py``) and prints one JSON result. One *paced* stream (the
``scripted`` model sends a token every ``delay`` seconds) is read twice: first alone (its idle
gaps), then while ``big_count`` requests with a ``big_prompt_bytes`` prompt are sent to the
``firehose`` model, one every ``big_interval`` seconds, each on its own connection. The gaps of
the paced stream are kept with their arrival time; the *loaded* figures are those that arrive while
at least one large request is in flight (between the first send and the last answer).

``target``: ``http`` (everything through the gateway: the stream on ``/v1/completions``, the large
prompts on ``big_path``) or ``floor`` (the same through ``tritonclient.grpc.aio`` straight to
Triton, so Triton's own cost of taking a large prompt shows in the floor's numbers too).

Usage: ``python bench/stallgen.py @spec.json`` (``big_prompts.py`` writes the spec).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen import HttpError, Record, SseProtocol, Window, floor_inputs, percentile, read_spec  # noqa: E402


class TimedWindow(Window):
    """A window that keeps each gap between two reads that brought tokens, with the time it ended.

    Unlike ``loadgen``'s throughput figures, a read that brings k tokens after a stall counts as
    one gap of the stall's length (not k gaps of 1/k of it): here the stall is what is measured,
    the time the client saw nothing."""

    def __init__(self) -> None:
        super().__init__(start=0.0, end=float("inf"))
        self.timed: list[tuple[float, float]] = []

    def arrival(self, record: Record, now: float, tokens: float) -> None:
        if tokens > 0 and record.last is not None:
            self.timed.append((now, now - record.last))
        super().arrival(record, now, tokens)


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def gap_stats(gaps: list[float]) -> dict[str, Any]:
    return {
        "gaps": len(gaps),
        "gap_p50_ms": _ms(percentile(gaps, 0.5)),
        "gap_p99_ms": _ms(percentile(gaps, 0.99)),
        "gap_max_ms": _ms(max(gaps)) if gaps else None,
    }


def http_request(spec: dict[str, Any], path: str, body: dict[str, Any]) -> bytes:
    raw = orjson.dumps(body)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {spec['host']}:{spec['port']}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(raw)}\r\n\r\n"
    )
    return head.encode() + raw


class HttpTarget:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec

    async def stream(self, window: TimedWindow) -> Record:
        spec = self.spec
        payload = http_request(
            spec,
            "/v1/completions",
            {"model": "scripted", "prompt": spec["stream_prompt"], "max_tokens": spec["stream_tokens"], "stream": True},
        )
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(SseProtocol, spec["host"], spec["port"])
        record = Record(sent=time.perf_counter())
        try:
            await proto.request(payload, record, window, True, len("tok "), False)
        finally:
            assert proto.transport is not None
            proto.transport.close()
        return record

    async def big(self) -> float:
        spec = self.spec
        path = spec["big_path"]
        body: dict[str, Any] = {"model": "firehose", "max_tokens": spec["big_max_tokens"], "stream": False}
        if path.endswith("chat/completions"):
            body["messages"] = [{"role": "user", "content": spec["big_prompt"]}]
        else:
            body["prompt"] = spec["big_prompt"]
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(SseProtocol, spec["host"], spec["port"])
        record = Record(sent=time.perf_counter())
        try:
            await proto.request(http_request(spec, path, body), record, Window(0.0, 0.0), False, len("tok "), False)
        finally:
            assert proto.transport is not None
            proto.transport.close()
        if record.chars != spec["big_max_tokens"] * len("tok "):
            raise HttpError(f"large request answered {record.chars} characters")
        return time.perf_counter() - record.sent

    async def close(self) -> None:
        return None


class FloorTarget:
    def __init__(self, spec: dict[str, Any]) -> None:
        import tritonclient.grpc.aio as grpcclient

        self.spec = spec
        self.grpc = grpcclient
        self.client = grpcclient.InferenceServerClient(spec["grpc_url"])

    def _inputs(self, prompt: str, max_tokens: int) -> list[Any]:
        return floor_inputs(self.grpc, prompt, {"max_tokens": max_tokens})

    async def _call(self, model: str, inputs: list[Any], on_token: Any) -> None:
        async def one() -> Any:
            yield {"model_name": model, "inputs": inputs}

        async for result, error in self.client.stream_infer(one()):
            if error is not None:
                raise RuntimeError(str(error))
            response = result.get_response()
            for index, output in enumerate(response.outputs):
                if output.name == "text_output" and len(response.raw_output_contents[index]) > 4:
                    on_token()

    async def stream(self, window: TimedWindow) -> Record:
        spec = self.spec
        record = Record(sent=time.perf_counter())
        inputs = self._inputs(spec["stream_prompt"], spec["stream_tokens"])

        def on_token() -> None:
            window.arrival(record, time.perf_counter(), 1.0)
            record.chars += 4

        await self._call("scripted", inputs, on_token)
        return record

    async def big(self) -> float:
        spec = self.spec
        sent = time.perf_counter()
        count = 0

        def on_token() -> None:
            nonlocal count
            count += 1

        await self._call("firehose", self._inputs(spec["big_prompt"], spec["big_max_tokens"]), on_token)
        if count != spec["big_max_tokens"]:
            raise RuntimeError(f"large request answered {count} tokens")
        return time.perf_counter() - sent

    async def close(self) -> None:
        await self.client.close()


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    target: HttpTarget | FloorTarget = HttpTarget(spec) if spec["target"] == "http" else FloorTarget(spec)
    try:
        await target.big()  # warm the path for large prompts (first-use imports and buffers)
        idle = TimedWindow()
        record = await target.stream(idle)
        if record.chars != spec["stream_tokens"] * 4:
            raise RuntimeError(f"idle stream got {record.chars // 4} of {spec['stream_tokens']} tokens")

        loaded = TimedWindow()
        stream = asyncio.ensure_future(target.stream(loaded))
        await asyncio.sleep(spec["big_start"])
        first_sent = time.perf_counter()
        bigs = []
        for _ in range(spec["big_count"]):
            bigs.append(asyncio.ensure_future(target.big()))
            await asyncio.sleep(spec["big_interval"])
        latencies = await asyncio.gather(*bigs)
        last_done = time.perf_counter()
        record = await stream
        if record.chars != spec["stream_tokens"] * 4:
            raise RuntimeError(f"loaded stream got {record.chars // 4} of {spec['stream_tokens']} tokens")
        if record.done is not None and record.done < last_done:
            raise RuntimeError("the paced stream ended before the large requests did: make it longer")
    finally:
        await target.close()
    during = [gap for when, gap in loaded.timed if first_sent <= when <= last_done]
    return {
        "target": spec["target"],
        "idle": gap_stats([gap for _, gap in idle.timed]),
        "loaded": gap_stats(during),
        "big_latency_p50_ms": _ms(percentile(list(latencies), 0.5)),
        "big_latency_max_ms": _ms(max(latencies)),
        "loaded_window_s": last_done - first_sent,
    }


def main() -> None:
    spec = read_spec(sys.argv[1])
    loop_factory = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        result = runner.run(run(spec))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
