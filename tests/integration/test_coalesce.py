"""``stream_coalesce_interval`` on a real gateway and Triton: a fast stream's tokens are grouped
into fewer chunks with every byte still there, a slow stream is streamed token by token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway

SCRIPTED = "scripted"
INTERVAL = 0.05


@pytest.fixture(scope="module")
def coalescing(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    log = Path(tmp_path_factory.mktemp("coalescing")) / "gateway.log"
    gateway = start_gateway(triton.grpc_url, log, "--stream-coalesce-interval", str(INTERVAL), wait_ready=True)
    yield gateway
    stop_gateway(gateway)


def paced(tokens: int, delay: float) -> str:
    """A scripted-model prompt: ``tokens`` responses ``"t<i> "``, ``delay`` seconds apart."""
    return json.dumps({"responses": [{"utf8": [f"t{i} "], "delay": delay} for i in range(tokens)]})


def content_chunks(gateway: GatewayProcess, prompt: str, tokens: int) -> list[str]:
    """The texts of a raw SSE stream's content chunks, after checking it ends with [DONE]."""
    body = {"model": SCRIPTED, "prompt": prompt, "max_tokens": tokens, "stream": True}
    events = []
    with httpx.stream("POST", gateway.url + "/v1/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line[len("data: ") :])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    return [chunk["choices"][0]["text"] for chunk in chunks if chunk["choices"] and chunk["choices"][0]["text"]]


def test_a_fast_stream_comes_in_fewer_chunks_with_every_token(coalescing: GatewayProcess) -> None:
    pieces = content_chunks(coalescing, paced(300, 0.001), 300)
    assert "".join(pieces) == "".join(f"t{i} " for i in range(300))
    # 300 tokens 1 ms apart last >= 0.3 s: about one chunk per 50 ms, far fewer than one per token.
    assert len(pieces) < 300 / 5


def test_a_stream_slower_than_the_interval_is_not_grouped(coalescing: GatewayProcess) -> None:
    pieces = content_chunks(coalescing, paced(4, 0.25), 4)
    assert pieces == [f"t{i} " for i in range(4)]


def test_the_sdk_reads_a_coalesced_stream_whole(coalescing: GatewayProcess) -> None:
    client = openai.OpenAI(base_url=coalescing.url + "/v1", api_key="unused")
    stream = client.completions.create(
        model=SCRIPTED, prompt=paced(100, 0.001), max_tokens=100, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "".join(f"t{i} " for i in range(100))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 100
