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
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import Report, fmt, ratio
from bench.stack import Stack, Variant, log

MODEL = "tiny-llm-embed"


def texts(batch: int) -> list[str]:
    return [f"the input number {i} of a benchmark batch" for i in range(batch)]


async def gateway_side(url: str, batch: int, concurrency: int, duration: float, warmup: float) -> dict[str, Any]:
    import httpx

    body = json.dumps({"model": MODEL, "input": texts(batch), "encoding_format": "float"}).encode()
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:

        async def one() -> None:
            reply = await client.post("/v1/embeddings", content=body, headers={"Content-Type": "application/json"})
            if reply.status_code != 200 or len(reply.json()["data"]) != batch:
                raise RuntimeError(f"gateway answered {reply.status_code}: {reply.text[:200]}")

        return await measure(one, batch, concurrency, duration, warmup)


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
    """``concurrency`` users calling ``one`` back to back; what finished inside the window counts."""
    start = time.perf_counter() + warmup
    end = start + duration
    latencies: list[float] = []

    async def user() -> None:
        while time.perf_counter() < end:
            sent = time.perf_counter()
            await one()
            done = time.perf_counter()
            if sent >= start and done <= end:
                latencies.append(done - sent)

    await asyncio.gather(*(user() for _ in range(concurrency)))
    latencies.sort()
    return {
        "requests": len(latencies),
        "inputs_per_s": len(latencies) * batch / duration,
        "p50_ms": latencies[len(latencies) // 2] * 1000 if latencies else None,
    }


def run(args: Any, variants: list[Variant], report: Report) -> None:
    batches = [int(b) for b in str(args.batches).split(",")]
    results: dict[str, dict[str, Any]] = {}
    rows = []
    gateway_args = ("--max-concurrent-requests=0", *args.gateway_arg)
    with Stack(variants, Path(tempfile.mkdtemp(prefix="bench-embeddings-")), gateway_args) as stack:
        for batch in batches:
            floor = asyncio.run(floor_side(stack.triton.grpc_url, batch, args.concurrency, args.duration, args.warmup))
            log(f"batch {batch}: floor {fmt(floor['inputs_per_s'])} inputs/s")
            results[f"floor/{batch}"] = floor
            for name, gateway in stack.gateways.items():
                side = asyncio.run(gateway_side(gateway.url, batch, args.concurrency, args.duration, args.warmup))
                log(f"batch {batch}: {name} {fmt(side['inputs_per_s'])} inputs/s")
                results[f"{name}/{batch}"] = side
                rows.append(
                    [
                        str(batch),
                        name,
                        fmt(floor["inputs_per_s"]),
                        fmt(side["inputs_per_s"]),
                        fmt(ratio(side["inputs_per_s"], floor["inputs_per_s"]), 2),
                        fmt(floor["p50_ms"]),
                        fmt(side["p50_ms"]),
                    ]
                )
    report.add(
        f"## /v1/embeddings on {MODEL}: {args.concurrency} clients, {args.duration:.0f} s per run",
        "",
    )
    header = ["batch", "variant", "floor inputs/s", "gateway inputs/s", "gateway / floor"]
    report.table([*header, "floor p50 ms", "gateway p50 ms"], rows)
    report.data["embeddings"] = results
