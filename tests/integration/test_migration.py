"""Streams that outlive their replica, and routing by engine load: three real tritonservers
serving tiny-llm greedily.

A replica busy with work another client sent it (not through the gateway) gets no new requests:
only its engine's gauges on Triton's metrics port say it is busy. Then 64 streams of 500 tokens
run once with every replica up (the reference), and once more while one replica is SIGKILLed and
another drained mid-stream: SIGTERM, on which Triton stops taking new work (its readiness fails)
but lets running streams go on, then SIGKILL after a 3 s grace, as Kubernetes does once a pod's
``terminationGracePeriodSeconds`` has passed. Every stream of the second run must complete and
equal its reference: the text, every token id (logprobs named ``token_id:<id>``) and ``usage``.
The streams are read as raw SSE over HTTP, a few through the openai SDK.
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import openai
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import (
    REFERENCE_REPOSITORY,
    GatewayProcess,
    start_gateway,
    stop_gateway,
    stop_in_background,
    wait_for,
)

MODEL = "tiny-llm"
REPLICAS = 3
STREAMS = 64
TOKENS = 500
SDK_STREAMS = 8
"""Of the streams, the ones read through the openai SDK (the rest as raw SSE)."""


def _server(base: Path, i: int) -> TritonServer:
    return TritonServer(
        REFERENCE_REPOSITORY,
        log_file=base / f"triton-{i}.log",
        extra_args=("--model-control-mode=explicit", f"--load-model={MODEL}"),
    )


@pytest.fixture(scope="module")
def tritons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[TritonServer]]:
    base = tmp_path_factory.mktemp("migration")
    servers = [_server(base, i) for i in range(REPLICAS)]
    with ThreadPoolExecutor(REPLICAS) as pool:
        list(pool.map(lambda s: s.start(), servers))
    yield servers
    stop_in_background(*servers)


@pytest.fixture(scope="module")
def gateway(tritons: list[TritonServer], tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = start_gateway(
        ",".join(t.grpc_url for t in tritons),
        tmp_path_factory.mktemp("gateway") / "gateway.log",
        "--triton-metrics",
        ",".join(str(t.metrics_port) for t in tritons),
        "--migration-limit",
        "3",
    )
    yield process
    stop_gateway(process)


@dataclass
class Stream:
    """What one client read."""

    text: str = ""
    ids: list[int] = field(default_factory=list)
    usage: dict[str, int] | None = None
    finish: str | None = None
    replica: str | None = None
    error: str | None = None
    done: bool = False
    tokens_seen: int = 0


def prompt(i: int) -> str:
    return f"Stream {i}: tell me a long story about the number {i * 7919 % 1000} and its friends."


def body(i: int, stop: str | None = None) -> dict[str, object]:
    extra: dict[str, object] = {"stop": [stop]} if stop else {}
    return {
        **extra,
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt(i)}],
        "max_tokens": TOKENS,
        "temperature": 0,
        "ignore_eos": True,
        "logprobs": True,
        "top_logprobs": 0,
        "return_tokens_as_token_ids": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _token_id(token: str) -> int:
    match = re.fullmatch(r"token_id:(\d+)", token)
    assert match, token
    return int(match[1])


def _take(stream: Stream, chunk: dict[str, object]) -> None:
    if chunk.get("usage"):
        stream.usage = {k: v for k, v in chunk["usage"].items() if k in ("prompt_tokens", "completion_tokens")}  # type: ignore[union-attr]
    for choice in chunk.get("choices") or []:  # type: ignore[union-attr]
        delta = choice.get("delta") or {}
        stream.text += delta.get("content") or ""
        for item in (choice.get("logprobs") or {}).get("content") or []:
            stream.ids.append(_token_id(item["token"]))
            stream.tokens_seen += 1
        if choice.get("finish_reason"):
            stream.finish = choice["finish_reason"]


async def raw_stream(client: httpx.AsyncClient, url: str, i: int, stream: Stream, stop: str | None) -> None:
    async with client.stream("POST", url + "/v1/chat/completions", json=body(i, stop)) as response:
        assert response.status_code == 200, await response.aread()
        stream.replica = response.headers.get("x-gateway-replica")
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                stream.done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                stream.error = json.dumps(chunk["error"])
                continue
            _take(stream, chunk)


async def sdk_stream(client: openai.AsyncOpenAI, i: int, stream: Stream) -> None:
    extra = body(i)
    raw = await client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=extra["messages"],  # type: ignore[arg-type]
        max_tokens=TOKENS,
        temperature=0,
        logprobs=True,
        top_logprobs=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
    )
    stream.replica = raw.headers.get("x-gateway-replica")
    try:
        async for chunk in raw.parse():
            _take(stream, chunk.model_dump(exclude_none=True))
        stream.done = True
    except openai.APIError as exc:
        stream.error = str(exc)


async def run_streams(url: str, during: object = None, stops: dict[int, str] | None = None) -> list[Stream]:
    """Every stream at once; ``during(streams)`` runs beside them (the chaos); ``stops``: a stop
    string for some of the raw streams."""
    stops = stops or {}
    streams = [Stream() for _ in range(STREAMS)]
    limits = httpx.Limits(max_connections=STREAMS, max_keepalive_connections=STREAMS)
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0), limits=limits) as client:
        sdk = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300.0)
        tasks = [
            sdk_stream(sdk, i, streams[i]) if i < SDK_STREAMS else raw_stream(client, url, i, streams[i], stops.get(i))
            for i in range(STREAMS)
        ]
        work = [asyncio.ensure_future(t) for t in tasks]
        if during is not None:
            await during(streams)  # type: ignore[operator]
        await asyncio.gather(*work)
        await sdk.close()
    return streams


def late_stop(stream: Stream, after_tokens: int) -> str | None:
    """A stop string whose first match in the reference text is past ``after_tokens`` tokens
    (after the chaos has struck), or None where the text repeats too much to have one."""
    start = len(stream.text) * after_tokens // TOKENS
    for offset in range(start, len(stream.text) - 12, 7):
        candidate = stream.text[offset : offset + 12]
        if candidate.strip() and stream.text.find(candidate) == offset:
            return candidate
    return None


def migrations(gateway: GatewayProcess) -> dict[str, float]:
    text = httpx.get(gateway.url + "/metrics", timeout=5).text
    found: dict[str, float] = {}
    for outcome, value in re.findall(
        r'^gateway_stream_migrations_total\{[^}]*outcome="(\w+)"[^}]*\} (\S+)$', text, re.M
    ):
        found[outcome] = found.get(outcome, 0.0) + float(value)
    return found


def in_flight(server: TritonServer) -> float:
    text = httpx.get(server.metrics_url, timeout=5).text
    match = re.search(r"^tiny_llm_requests_in_flight\{[^}]*\} (\S+)$", text, re.M)
    return float(match[1]) if match else 0.0


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (in any order)."""
    total = 0.0
    for found, value in re.findall(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", text, re.M):
        if all(f'{k}="{v}"' in found for k, v in labels.items()):
            total += float(value)
    return total


def _drain(call: Any) -> None:
    try:
        for _ in call:
            pass
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.CANCELLED:
            raise


def direct_streams(server: TritonServer, count: int) -> list[Any]:
    """``count`` long greedy streams straight to one Triton, not through the gateway (another
    client of the same replica); cancel them to end them."""
    channel = grpc.insecure_channel(server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    calls = []
    for i in range(count):
        request = service_pb2.ModelInferRequest(model_name=MODEL, id=f"direct-{i}")
        for name, datatype, raw in (
            ("text_input", "BYTES", prompt(1000 + i).encode()),
            ("sampling_parameters", "BYTES", json.dumps({"max_tokens": 20000, "ignore_eos": True}).encode()),
            ("stream", "BOOL", b"\x01"),
        ):
            tensor = request.inputs.add()
            tensor.name, tensor.datatype = name, datatype
            tensor.shape.append(1)
            request.raw_input_contents.append(struct.pack("<I", len(raw)) + raw if datatype == "BYTES" else raw)
        call = stub.ModelStreamInfer(iter([request]))
        threading.Thread(target=_drain, args=(call,), daemon=True).start()
        calls.append(call)
    return calls


def test_a_replica_busy_with_another_client_s_work_gets_no_new_requests(
    gateway: GatewayProcess, tritons: list[TritonServer]
) -> None:
    """The gateway runs nothing on it: only the engine's own gauges, read from Triton's metrics
    port, say it is busy. Its KV-cache use reaches the gateway's ``vllm:kv_cache_usage_perc``."""
    busy, others = tritons[0], {t.grpc_url for t in tritons[1:]}
    calls = direct_streams(busy, 8)
    try:
        assert wait_for(
            lambda: (
                metric_sum(
                    httpx.get(gateway.url + "/metrics", timeout=5).text,
                    "gateway_replica_engine_requests",
                    replica=busy.grpc_url,
                    state="running",
                )
                >= 8
            ),
            timeout=20,
        ), "the gateway never read the busy replica's engine load"
        placed = []
        for i in range(9):
            response = httpx.post(
                gateway.url + "/v1/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": f"hi {i}"}], "max_tokens": 4},
                timeout=30,
            )
            assert response.status_code == 200, response.text
            assert response.headers["x-gateway-route"] == "least_loaded"
            placed.append(response.headers["x-gateway-replica"])
        assert set(placed) == others, placed
        metrics = httpx.get(gateway.url + "/metrics", timeout=5).text
        assert metric_sum(metrics, "vllm:kv_cache_usage_perc", model_name=MODEL) > 0
        assert metric_sum(metrics, "gateway_replica_metrics_up", replica=busy.grpc_url) == 1
    finally:
        for call in calls:
            call.cancel()
    assert wait_for(lambda: in_flight(busy) == 0, timeout=20), "the direct streams did not end"


def test_streams_survive_a_killed_and_a_drained_replica_token_for_token(
    gateway: GatewayProcess, tritons: list[TritonServer]
) -> None:
    reference = asyncio.run(run_streams(gateway.url))
    for i, stream in enumerate(reference):
        assert stream.done and stream.error is None, (i, stream.error)
        assert len(stream.ids) == TOKENS and stream.usage and stream.usage["completion_tokens"] == TOKENS

    killed, drained = tritons[0], tritons[1]

    async def chaos(streams: list[Stream]) -> None:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + 120
        # Mid-stream: every stream has its first tokens, none is near its end.
        while min(s.tokens_seen for s in streams) < 20 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        killed.kill()
        while min(s.tokens_seen for s in streams) < 120 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await loop.run_in_executor(None, lambda: drained.stop(grace=3.0))

    # A quarter of the raw streams stop at a string their reference only reaches after the chaos:
    # stop strings go on across the move, as the text does.
    stops = {i: stop for i in range(SDK_STREAMS, STREAMS, 4) if (stop := late_stop(reference[i], 300))}
    assert len(stops) >= 8, "the references repeat too much to have late stop strings"
    before = migrations(gateway)
    chaotic = asyncio.run(run_streams(gateway.url, chaos, stops))
    on_killed = sum(s.replica == killed.grpc_url for s in chaotic)
    on_drained = sum(s.replica == drained.grpc_url for s in chaotic)
    assert on_killed and on_drained, "the streams were spread over the replicas"
    for i, (got, want) in enumerate(zip(chaotic, reference, strict=True)):
        assert got.error is None and got.done, (i, got.replica, got.error)
        if i in stops:
            cut = want.text.index(stops[i])
            assert got.finish == "stop" and got.text == want.text[:cut], f"stream {i}: stop string"
            assert got.ids == want.ids[: len(got.ids)] and got.usage is not None
            assert got.usage["prompt_tokens"] == want.usage["prompt_tokens"]  # type: ignore[index]
            assert len(got.ids) <= got.usage["completion_tokens"] < TOKENS
            continue
        assert got.finish == want.finish == "length", i
        assert got.ids == want.ids, f"stream {i} (first on {got.replica}): token ids differ"
        assert got.text == want.text, f"stream {i}: text differs"
        assert got.usage == want.usage, f"stream {i}: usage {got.usage} != {want.usage}"
    moved = migrations(gateway)
    continued = moved.get("continued", 0.0) - before.get("continued", 0.0)
    # Every stream on either replica moved (the drained one's 3 s grace is far shorter than what
    # its streams had left); a stream moved to the drained replica moved twice.
    assert continued >= on_killed + on_drained, (moved, on_killed, on_drained)
    assert moved.get("failed", 0.0) == before.get("failed", 0.0)
    survivor = tritons[2]
    assert wait_for(lambda: in_flight(survivor) == 0, timeout=10), "work left running in the surviving Triton"
