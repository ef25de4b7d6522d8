"""``/v1/embeddings`` over Triton's real vLLM backend (``runner: pooling``) against vLLM's own
server in pooling mode, on the same weights: the same vectors (to float tolerance), shapes and
usage, for every input shape, both encodings, and ``dimensions``.

Its own Triton (one pooling engine, and the project's reference embedding model, held to the
same vectors) and vLLM server, started side by side on first use and stopped after this file: a
pooling engine cannot share the lane's generating one.
"""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.vllm_lane import lane

TEXTS = ["Hello there", "an embedding of a longer sentence, with punctuation!", "x"]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    if not (lane.PEER / "model.py").is_file():
        pytest.skip(f"Triton's vLLM backend is not at {lane.PEER}")
    workdir: Path = tmp_path_factory.mktemp("vllm-lane-embeddings")
    repository = lane.build_embedding_repository(workdir / "repository")
    started = time.monotonic()
    vllm = lane.spawn_vllm_embedding(workdir / "vllm.log")
    triton = gateway = None
    try:
        triton = lane.start_triton(repository, workdir)
        gateway = lane.spawn_gateway(triton.grpc_url, repository, workdir / "gateway.log")
        gateway.wait_ready("/health/ready", 60)
        vllm.wait_ready("/v1/models", 300)
        print(f"embedding servers ready in {time.monotonic() - started:.0f} s; logs in {workdir}")
        yield gateway.url, vllm.url
    finally:
        if gateway is not None:
            gateway.stop()
        if triton is not None:
            triton.stop(grace=30.0)
        vllm.stop()


def both(servers: tuple[str, str], model: str = lane.EMBED_MODEL, **body: Any) -> tuple[httpx.Response, httpx.Response]:
    gateway, vllm = servers
    return (
        httpx.post(gateway + "/v1/embeddings", json={"model": model, **body}, timeout=120),
        httpx.post(vllm + "/v1/embeddings", json={"model": lane.EMBED_MODEL, **body}, timeout=120),
    )


def vectors(response: httpx.Response) -> list[list[float]]:
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [d["index"] for d in data] == list(range(len(data)))
    return [
        list(struct.unpack(f"<{len(base64.b64decode(d['embedding'])) // 4}f", base64.b64decode(d["embedding"])))
        if isinstance(d["embedding"], str)
        else d["embedding"]
        for d in data
    ]


def same(gateway: httpx.Response, vllm: httpx.Response) -> None:
    ours, theirs = vectors(gateway), vectors(vllm)
    assert [len(v) for v in ours] == [len(v) for v in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < TOLERANCE
    assert gateway.json()["usage"]["prompt_tokens"] == vllm.json()["usage"]["prompt_tokens"]
    assert gateway.json()["usage"]["total_tokens"] == vllm.json()["usage"]["total_tokens"]


@pytest.mark.parametrize(
    "value",
    [TEXTS[0], TEXTS, [1, 200, 300, 17], [[1, 200], [5, 6, 7]]],
    ids=["string", "strings", "token-ids", "token-id-lists"],
)
def test_every_input_shape_matches(servers: tuple[str, str], value: Any) -> None:
    same(*both(servers, input=value))


def test_base64_matches(servers: tuple[str, str]) -> None:
    same(*both(servers, input=TEXTS, encoding_format="base64"))


def test_dimensions_match(servers: tuple[str, str]) -> None:
    gateway, vllm = both(servers, input=TEXTS, dimensions=32)
    same(gateway, vllm)
    assert len(vectors(gateway)[0]) == 32


@pytest.mark.parametrize("dimensions", [None, 64])
def test_the_reference_model_pools_as_vllm_does(servers: tuple[str, str], dimensions: int | None) -> None:
    """``tiny-llm-embed``, the main suite's stand-in, against vLLM's own server."""
    extra = {} if dimensions is None else {"dimensions": dimensions}
    same(*both(servers, model=lane.REFERENCE_EMBED_MODEL, input=TEXTS, **extra))
    same(*both(servers, model=lane.REFERENCE_EMBED_MODEL, input=[[1, 200, 300], [7]], **extra))


def test_refusals_are_400_on_both(servers: tuple[str, str]) -> None:
    for body in ({"input": "x", "dimensions": 48}, {"input": [1, 99999]}):
        gateway, vllm = both(servers, **body)
        assert (gateway.status_code, vllm.status_code) == (400, 400), (body, gateway.text, vllm.text)
