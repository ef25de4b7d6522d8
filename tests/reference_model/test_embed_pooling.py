"""tiny-llm-embed's request reading and pooling (``pooling.py``, beside its ``model.py``)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

VERSION_DIR = Path(__file__).resolve().parents[2] / "triton_models" / "reference" / "tiny-llm-embed" / "1"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tiny_llm_embed_pooling", VERSION_DIR / "pooling.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


pooling = _load()
CONFIG = pooling.load_embed_config(VERSION_DIR)


def parse(body: object) -> object:
    return pooling.parse_embedding_request(json.dumps(body).encode(), "tiny-llm-embed", CONFIG, 128)


def test_model_json_gives_weights_context_and_matryoshka_sizes() -> None:
    assert (CONFIG.model_dir / "config.json").is_file()
    assert CONFIG.max_model_len == 2048 and CONFIG.matryoshka_dimensions == (32, 64, 128)


def test_the_request_is_the_vllm_backends_json() -> None:
    assert parse({"input": "hi"}) == pooling.EmbedInput("hi", None)
    assert parse({"input": [1, 2], "pooling_params": {"dimensions": [64]}}) == pooling.EmbedInput([1, 2], 64)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"input": ""}, "cannot be empty"),
        ({"input": [1.5]}, "string or a list of token ids"),
        ({"nope": 1}, "'input'"),
        ({"input": "x", "pooling_params": {"dimensions": [48]}}, "only supports [32, 64, 128]"),
        ({"input": "x", "pooling_params": {"dimensions": [0]}}, "greater than 0"),
    ],
)
def test_refusals_use_vllms_words(body: object, words: str) -> None:
    with pytest.raises(pooling.EmbedRequestError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse(body)


def test_token_checks() -> None:
    with pytest.raises(pooling.EmbedRequestError, match="out of vocabulary"):
        pooling.check_tokens([1, 5000], 1333, 2048)
    with pytest.raises(pooling.EmbedRequestError, match="maximum context length is 4 tokens"):
        pooling.check_tokens([1] * 5, 1333, 4)


def test_pooling_cuts_then_normalizes() -> None:
    vector = pooling.pool_last([3.0, 4.0, 12.0], 2)
    assert vector == [0.6, 0.8]
    assert math.isclose(sum(x * x for x in pooling.pool_last([1.0, 2.0, 3.0], None)), 1.0)
    assert pooling.pool_last([0.0, 0.0], None) == [0.0, 0.0]
