"""``embeddings``: inputs embedded per second through the gateway, against the direct gRPC floor.

One Triton with ``tiny-llm-embed`` and one gateway per variant. For each batch size (inputs per
``/v1/embeddings`` request), ``--concurrency`` clients send requests back to back for
``--duration`` seconds; the floor does the same work straight to Triton with
``tritonclient.grpc.aio``: per "request", one ``ModelStreamInfer`` call per input, all at once,
with the tensors the gateway sends. The client runs in this process, on its own event loop: on
two cores it takes CPU from both sides alike.
"""

from __future__ import annotations

import asyncio
import json
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import Report, fmt, ratio
from bench.stack import Stack, Variant, log

MODEL = "tiny-llm-embed"


def texts(batch: int) -> list[str]:
    return [f"the input number {i} of a benchmark batch" for i in range(batch)]


class JsonConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection, one request at a time (httptools parses the answer):
    an HTTP client costing as little as the floor's, so that the comparison is the gateway's."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.body = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, piece: bytes) -> None:
        self.body += piece

    def on_message_complete(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.parser.get_status_code(), bytes(self.body)))

    async def post(self, payload: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self.body = bytearray()
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(payload)
        return await self.waiter


async def gateway_side(url: str, batch: int, concurrency: int, duration: float, warmup: float) -> dict[str, Any]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"model": MODEL, "input": texts(batch), "encoding_format": "float"}).encode()
    head = f"POST /v1/embeddings HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    payload = (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    loop = asyncio.get_running_loop()
    connections = [(await loop.create_connection(JsonConnection, host, int(port)))[1] for _ in range(concurrency)]
    free = list(connections)

    async def one() -> None:
        connection = free.pop()
        try:
            status, answer = await connection.post(payload)
        finally:
            free.append(connection)
        if status != 200 or len(json.loads(answer)["data"]) != batch:
            raise RuntimeError(f"gateway answered {status}: {answer[:200]!r}")

    try:
        return await measure(one, batch, concurrency, duration, warmup)
    finally:
        for connection in connections:
            if connection.transport is not None:
                connection.transport.close()


async def floor_side(grpc_url: str, batch: int, concurrency: int, duration: float, warmup: float) -> dict[str, Any]:
    import numpy as np
    import tritonclient.grpc.aio as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)

    def inputs(text: str) -> list[Any]:
        def tensor(name: str, value: Any, dtype: str) -> Any:
            item = grpcclient.InferInput(name, [1], dtype)
            item.set_data_from_numpy(np.array([value], dtype=np.object_ if dtype == "BYTES" else np.bool_))
            return item

        return [
            tensor("text_input", b"", "BYTES"),
            tensor("embedding_request", json.dumps({"input": text}).encode(), "BYTES"),
            tensor("return_num_input_tokens", True, "BOOL"),
        ]

    prepared = [inputs(text) for text in texts(batch)]

    async def call(tensors: list[Any]) -> None:
        async def request() -> Any:
            yield {"model_name": MODEL, "inputs": tensors}

        async for result, error in client.stream_infer(request()):
            if error is not None:
                raise RuntimeError(str(error))
            json.loads(result.as_numpy("text_output")[0])

    async def one() -> None:
        await asyncio.gather(*(call(tensors) for tensors in prepared))

    try:
        return await measure(one, batch, concurrency, duration, warmup)
    finally:
        await client.close()


async def measure(one: Any, batch: int, concurrency: int, duration: float, warmup: float) -> dict[str, Any]:
    """``concurrency`` users calling ``one`` back to back. Throughput: the requests that ended
    inside the window (a batch of 128 takes seconds: counting only those that also began in it
    would drop most); latency: those wholly inside it."""
    start = time.perf_counter() + warmup
    end = start + duration
    ended = 0
    latencies: list[float] = []

    async def user() -> None:
        nonlocal ended
        while time.perf_counter() < end:
            sent = time.perf_counter()
            await one()
            done = time.perf_counter()
            if start <= done <= end:
                ended += 1
                if sent >= start:
                    latencies.append(done - sent)

    await asyncio.gather(*(user() for _ in range(concurrency)))
    latencies.sort()
    return {
        "requests": ended,
        "inputs_per_s": ended * batch / duration,
        "p50_ms": latencies[len(latencies) // 2] * 1000 if latencies else None,
    }


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = sorted(r[key] for r in runs if r[key] is not None)
    return values[len(values) // 2] if values else None


def run(args: Any, variants: list[Variant], report: Report) -> None:
    batches = [int(b) for b in str(args.batches).split(",")]
    runs: dict[str, list[dict[str, Any]]] = {}
    gateway_args = ("--max-concurrent-requests=0", *args.gateway_arg)
    timing = (args.concurrency, args.duration, args.warmup)
    with Stack(variants, Path(tempfile.mkdtemp(prefix="bench-embeddings-")), gateway_args) as stack:
        for round_ in range(args.repeat):
            for batch in batches:  # the floor and each variant alternated, round after round
                floor = asyncio.run(floor_side(stack.triton.grpc_url, batch, *timing))
                runs.setdefault(f"floor/{batch}", []).append(floor)
                log(f"round {round_ + 1}, batch {batch}: floor {fmt(floor['inputs_per_s'])} inputs/s")
                for name, gateway in stack.gateways.items():
                    side = asyncio.run(gateway_side(gateway.url, batch, *timing))
                    runs.setdefault(f"{name}/{batch}", []).append(side)
                    log(f"round {round_ + 1}, batch {batch}: {name} {fmt(side['inputs_per_s'])} inputs/s")
    rows = []
    for batch in batches:
        floor_runs = runs[f"floor/{batch}"]
        for name in (v.name for v in variants):
            side_runs = runs[f"{name}/{batch}"]
            ratios = [ratio(s["inputs_per_s"], f["inputs_per_s"]) for s, f in zip(side_runs, floor_runs, strict=True)]
            rows.append(
                [
                    str(batch),
                    name,
                    fmt(_median(floor_runs, "inputs_per_s")),
                    fmt(_median(side_runs, "inputs_per_s")),
                    fmt(sorted(r for r in ratios if r is not None)[len(ratios) // 2] if ratios else None, 2),
                    fmt(_median(floor_runs, "p50_ms")),
                    fmt(_median(side_runs, "p50_ms")),
                ]
            )
    report.add(
        f"## /v1/embeddings on {MODEL}: {args.concurrency} clients, {args.duration:.0f} s per run, "
        f"medians of {args.repeat} round(s)",
        "",
    )
    header = ["batch", "variant", "floor inputs/s", "gateway inputs/s", "gateway / floor (median of rounds)"]
    report.table([*header, "floor p50 ms", "gateway p50 ms"], rows)
    report.data["embeddings"] = runs
