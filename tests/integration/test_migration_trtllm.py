"""A stream moves between TensorRT-LLM replicas as token ids: two real tritonservers serving the
stand-in stack (``tests/triton_models_trtllm``), greedy, one SIGKILLed mid-stream.

The ``tensorrt_llm`` layout takes ``input_ids``, so the continuation is the prompt's ids followed
by the generated ids, with ``max_tokens`` and ``min_tokens`` less what was produced
(``backend/contracts/continuation.py``); the stand-in engine then prefills what it had decoded.
The stand-in computes in float32 on one thread and its continuations decode alike (checked
offline over 36 cuts of six prompts), so each moved stream must equal its uninterrupted run: every
token id (logprobs named ``token_id:<id>``) and ``usage``. Not the text: the stand-in's random
weights emit byte tokens that make no character, which the gateway's incremental detokenizer
turns into U+FFFD by the window it sees, and that depends on how the ids were grouped into
responses (a move regroups them). tiny-llm's moved streams are held to their text too
(``test_migration.py``).
"""

from __future__ import annotations

import collections
import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway, stop_in_background
from tests.integration.trtllm_stack import start_trtllm_triton

MODEL = "ensemble"
"""Chat to the ensemble runs its ``tensorrt_llm`` step directly, in token ids (the gateway's default)."""
STREAMS = 8
TOKENS = 400


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[TritonServer, Path]]]:
    folders = [tmp_path_factory.mktemp(f"trtllm-{i}") for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        servers = list(pool.map(lambda f: start_trtllm_triton(f, f / "tritonserver.log"), folders))
    yield [(s, f / "trtllm_repository") for s, f in zip(servers, folders, strict=True)]
    stop_in_background(*servers)


@pytest.fixture(scope="module")
def gateway(
    stacks: list[tuple[TritonServer, Path]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    servers = [s for s, _ in stacks]
    process = start_gateway(
        ",".join(s.grpc_url for s in servers),
        tmp_path_factory.mktemp("gateway") / "gateway.log",
        "--model-repository",
        str(stacks[0][1]),
        "--triton-metrics",
        ",".join(str(s.metrics_port) for s in servers),
        "--routing-policy",
        "least_loaded",
    )
    yield process
    stop_gateway(process)


@dataclass
class Stream:
    text: str = ""
    ids: list[int] = field(default_factory=list)
    usage: dict[str, int] | None = None
    finish: str | None = None
    replica: str | None = None
    error: str | None = None
    chunks: int = 0


def read_stream(gateway: GatewayProcess, i: int, stream: Stream) -> Stream:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"story number {i}: the gateway streams tokens from triton"}],
        "max_tokens": TOKENS,
        "min_tokens": TOKENS,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 0,
        "return_tokens_as_token_ids": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        stream.replica = response.headers["x-gateway-replica"]
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                stream.error = json.dumps(chunk["error"])
                continue
            if chunk.get("usage"):
                stream.usage = {k: chunk["usage"][k] for k in ("prompt_tokens", "completion_tokens")}
            for choice in chunk["choices"]:
                stream.text += choice["delta"].get("content") or ""
                for item in (choice.get("logprobs") or {}).get("content") or []:
                    stream.ids.append(int(item["token"].removeprefix("token_id:")))
                stream.chunks += 1
                stream.finish = choice.get("finish_reason") or stream.finish
    return stream


def run(gateway: GatewayProcess, chaos: object = None) -> list[Stream]:
    streams = [Stream() for _ in range(STREAMS)]
    with ThreadPoolExecutor(STREAMS) as pool:
        futures = [pool.submit(read_stream, gateway, i, streams[i]) for i in range(STREAMS)]
        if chaos is not None:
            chaos(streams)  # type: ignore[operator]
        return [f.result() for f in futures]


def test_a_stream_cut_on_one_tensorrt_llm_replica_goes_on_on_the_other_token_for_token(
    gateway: GatewayProcess, stacks: list[tuple[TritonServer, Path]]
) -> None:
    reference = run(gateway)
    for stream in reference:
        assert stream.error is None and stream.usage is not None and stream.usage["completion_tokens"] == TOKENS
    servers = {s.grpc_url: s for s, _ in stacks}
    struck: list[tuple[str, int]] = []

    def kill_mid_stream(streams: list[Stream]) -> None:
        # Every stream has its first tokens out; the replica with the most streams still going
        # (the two may run at different speeds on a busy machine) is killed.
        deadline = time.monotonic() + 60
        while any(s.chunks < 20 and s.finish is None for s in streams) and time.monotonic() < deadline:
            time.sleep(0.01)
        going = collections.Counter(s.replica for s in streams if s.finish is None)
        assert going, "every stream ended before the kill"
        replica, count = going.most_common(1)[0]
        struck.append((str(replica), count))
        servers[str(replica)].kill()

    moved = run(gateway, kill_mid_stream)
    ((victim, cut),) = struck
    assert cut >= 1 and sum(s.replica == victim for s in moved) >= cut
    for i, (got, want) in enumerate(zip(moved, reference, strict=True)):
        assert got.error is None, (i, got.error)
        assert len(got.ids) == TOKENS and got.ids == want.ids, f"stream {i} (first on {got.replica})"
        assert got.usage == want.usage and got.finish == want.finish == "length", i
    metrics = httpx.get(gateway.url + "/metrics", timeout=5).text
    continued = re.findall(r'^gateway_stream_migrations_total\{[^}]*outcome="continued"[^}]*\} (\S+)$', metrics, re.M)
    assert sum(float(v) for v in continued) >= 1
