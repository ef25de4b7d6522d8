"""The context length vLLM derives from the weights' config.json, for a model.json without
``max_model_len``: the table of config shapes, then the catalog, ``/v1/models``, ``/tokenize``,
the default ``max_tokens`` and the over-long refusal using it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.config import Settings
from gateway.errors import ContextLengthExceededError
from gateway.models.catalog import ModelCatalog
from gateway.models.context_length import derive_max_model_len
from gateway.models.files import read_local_model_files
from gateway.plan.prepare import RequestContext, prepare_chat
from gateway.plan.requests import ChatCompletionRequest
from tests.fakes import ScriptedBackend
from tests.unit.test_app import WEIGHTS

LLAMA = {"model_type": "llama", "max_position_embeddings": 131072, "rope_theta": 500000.0}
QWEN2_YARN = {
    "model_type": "qwen2",
    "max_position_embeddings": 32768,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
}
GEMMA3 = {
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "max_position_embeddings": 131072,
        "sliding_window": 1024,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    },
    "vision_config": {"model_type": "siglip_vision_model"},
}

# name → (config.json, model.json, derived)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], int | None]] = {
    "llama": (LLAMA, {}, 131072),
    "llama 3.1 rope (already scaled)": (
        {**LLAMA, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}},
        {},
        131072,
    ),
    "qwen2 with yarn (already scaled)": (QWEN2_YARN, {}, 32768),
    "linear rope multiplies": (
        {"max_position_embeddings": 4096, "rope_parameters": {"rope_type": "linear", "factor": 2.0}},
        {},
        8192,
    ),
    "dynamic rope, legacy 'type'": (
        {"max_position_embeddings": 2048, "rope_scaling": {"type": "dynamic", "factor": 4}},
        {},
        8192,
    ),
    "a null factor counts as 1": (
        {"max_position_embeddings": 2048, "rope_scaling": {"rope_type": "linear", "factor": None}},
        {},
        2048,
    ),
    "default rope has no factor": (
        {"max_position_embeddings": 4096, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}},
        {},
        4096,
    ),
    "mrope (legacy) is default": (
        {"max_position_embeddings": 128000, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}},
        {},
        128000,
    ),
    "longrope defaults to the original length": (
        {
            "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096,
            "rope_scaling": {"type": "su", "short_factor": [1.0], "long_factor": [2.0]},
        },
        {},
        4096,
    ),
    "rope per layer type": (
        {
            "max_position_embeddings": 8192,
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 4.0},
                "sliding_attention": {"rope_type": "default"},
            },
        },
        {},
        32768,
    ),
    "gemma3: text_config, its rope factor not applied": (GEMMA3, {}, 131072),
    "gemma3 with disable_sliding_window": (GEMMA3, {"disable_sliding_window": True}, 1024),
    "llava: text_config nested": (
        {"model_type": "llava", "text_config": {"model_type": "llama", "max_position_embeddings": 4096}},
        {},
        4096,
    ),
    "gpt2: n_positions": ({"model_type": "gpt2", "n_positions": 1024, "n_ctx": 1024}, {}, 1024),
    "the smallest key wins": ({"max_position_embeddings": 8192, "seq_length": 4096}, {}, 4096),
    "model_max_length wins outright (Command-R)": (
        {"max_position_embeddings": 8192, "model_max_length": 131072},
        {},
        131072,
    ),
    "chatglm: seq_length": ({"model_type": "chatglm", "seq_length": 32768}, {}, 32768),
    "no key at all": ({"model_type": "mystery", "hidden_size": 64}, {}, None),
    "booleans and zeros are not lengths": ({"max_position_embeddings": True, "seq_len": 0}, {}, None),
    "hf_overrides apply first": (LLAMA, {"hf_overrides": {"max_position_embeddings": 16384}}, 16384),
    "a sliding window is ignored unless disabled": (
        {"max_position_embeddings": 32768, "sliding_window": 4096},
        {},
        32768,
    ),
    "qwen2's unused sliding window stays unused": (
        {"max_position_embeddings": 32768, "sliding_window": 4096, "use_sliding_window": False},
        {"disable_sliding_window": True},
        32768,
    ),
}


@pytest.mark.parametrize(("config", "engine", "expected"), CASES.values(), ids=CASES.keys())
def test_derived_as_vllm_derives_it(config: dict[str, Any], engine: dict[str, Any], expected: int | None) -> None:
    assert derive_max_model_len(config, engine) == expected


def test_the_tokenizer_caps_only_a_pooling_model_with_absolute_positions() -> None:
    bert = {"model_type": "bert", "max_position_embeddings": 512, "position_embedding_type": "absolute"}
    tokenizer = {"model_max_length": 256}
    assert derive_max_model_len(bert, tokenizer_config=tokenizer, pooling=True) == 256
    assert derive_max_model_len(bert, tokenizer_config=tokenizer, pooling=False) == 512
    assert derive_max_model_len(LLAMA, tokenizer_config={"model_max_length": 2048}, pooling=True) == 131072
    assert derive_max_model_len(bert, sentence_config={"max_seq_length": 128}) == 128, "sentence-transformers"


def repository(tmp_path: Path, engine: dict[str, Any], config: dict[str, Any] | None = None) -> Path:
    """Model ``m``: tiny-llm's tokenizer, and weights whose config.json is ``config`` (``LLAMA``,
    131072 positions, when None)."""
    weights = tmp_path / "weights"
    weights.mkdir(parents=True)
    (weights / "config.json").write_text(json.dumps(LLAMA if config is None else config))
    version = tmp_path / "repo" / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(json.dumps({"model": str(weights), "tokenizer": str(WEIGHTS), **engine}))
    return tmp_path / "repo"


def test_model_files_carry_both_numbers(tmp_path: Path) -> None:
    files = read_local_model_files(repository(tmp_path, {}), "m")
    assert (files.max_model_len, files.derived_max_model_len) == (None, 131072)
    unknown = read_local_model_files(repository(tmp_path / "x", {"max_model_len": -1}), "m")
    assert unknown.max_model_len is None, "-1: the engine fits it to memory at start"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def served_length(repo: Path) -> int | None:
    catalog = ModelCatalog(ScriptedBackend(), [repo])  # type: ignore[arg-type]
    try:
        await catalog.refresh()
        return (await catalog.models())["m"].max_model_len
    finally:
        catalog.close()


@pytest.mark.anyio
async def test_model_json_wins_and_a_length_over_the_derived_one_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert await served_length(repository(tmp_path / "a", {})) == 131072
    assert await served_length(repository(tmp_path / "b", {"max_model_len": 4096})) == 4096
    with caplog.at_level(logging.WARNING, logger="gateway.models.catalog"):
        assert await served_length(repository(tmp_path / "c", {"max_model_len": 1_000_000})) == 1_000_000
    assert "max_model_len 1000000 is above the 131072" in caplog.text
    small = {"max_position_embeddings": 64, "rope_parameters": {"rope_type": "linear", "factor": 2.0}}
    assert await served_length(repository(tmp_path / "d", {}, small)) == 128


@pytest.mark.anyio
async def test_the_edge_and_the_budget_use_the_derived_length(tmp_path: Path) -> None:
    """config.json says 64 positions × linear factor 2: ``/v1/models`` and ``/tokenize`` say 128,
    a chat without ``max_tokens`` asks for the rest of it, and a longer prompt is refused."""
    small = {"max_position_embeddings": 64, "rope_parameters": {"rope_type": "linear", "factor": 2.0}}
    repo = repository(tmp_path, {}, small)
    app = create_app(Settings(model_repository=[repo], first_response_wait=1.0), backend=ScriptedBackend())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            models = (await client.get("/v1/models")).json()["data"]
            tokenized = (await client.post("/tokenize", json={"model": "m", "prompt": "hello world"})).json()
    assert [m["max_model_len"] for m in models if m["id"] == "m"] == [128]
    assert tokenized["max_model_len"] == 128
    catalog = ModelCatalog(ScriptedBackend(), [repo])  # type: ignore[arg-type]
    await catalog.refresh()
    try:
        body = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        plan = await prepare_chat(body, RequestContext("r"), catalog, Settings())
        (prompt_tokens,) = plan.prompt_tokens
        assert prompt_tokens is not None and plan.max_tokens == (128 - prompt_tokens,)
        long = ChatCompletionRequest.model_validate(
            {"model": "m", "messages": [{"role": "user", "content": "word " * 200}]}
        )
        with pytest.raises(ContextLengthExceededError, match="maximum context length is 128 tokens"):
            await prepare_chat(long, RequestContext("r"), catalog, Settings())
    finally:
        catalog.close()
