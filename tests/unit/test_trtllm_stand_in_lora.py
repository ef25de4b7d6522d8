"""LoRA in TensorRT-LLM's format and the task cache (tests/trtllm_stand_ins/lora.py), and the
committed adapters (tests/trtllm_stand_ins/assets/lora)."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file

from tests.trtllm_stand_ins.build import ASSETS, PEFT_ADAPTERS
from tests.trtllm_stand_ins.lora import (
    CACHE_FULL_MESSAGE,
    LoraCache,
    LoraError,
    ModelShape,
    pack_adapter,
    read_peft_adapter,
    unpack_adapter,
)

SHAPE = ModelShape(hidden_size=128, intermediate_size=256, num_layers=2, q_size=128, kv_size=64)


def test_the_committed_adapters_carry_the_batch_dim_the_openai_frontend_sends_as_is() -> None:
    for name in ("alpha", "beta"):
        weights = np.load(ASSETS / "lora" / name / "model.lora_weights.npy")
        config = np.load(ASSETS / "lora" / name / "model.lora_config.npy")
        assert weights.dtype == np.float16 and weights.shape == (1, 4, 8 * 128 + 128 * 8)
        assert config.dtype == np.int32 and config.tolist() == [[[1, 0, 8], [3, 0, 8], [1, 1, 8], [3, 1, 8]]]
        again_weights, again_config = read_peft_adapter(PEFT_ADAPTERS / name)
        assert np.array_equal(again_weights, weights) and np.array_equal(again_config, config)


def test_rows_hold_a_then_b_with_alpha_over_r_folded_into_b() -> None:
    peft = load_file(str(PEFT_ADAPTERS / "alpha" / "adapter_model.safetensors"))
    weights, config = read_peft_adapter(PEFT_ADAPTERS / "alpha")
    deltas = unpack_adapter(weights[0], config[0], SHAPE, max_rank=64)
    v_layer_1 = next(d for d in deltas if (d.module_id, d.layer) == (3, 1))
    prefix = "base_model.model.model.layers.1.self_attn.v_proj"
    np.testing.assert_allclose(v_layer_1.a, peft[f"{prefix}.lora_A.weight"], atol=1e-3)
    np.testing.assert_allclose(v_layer_1.b, peft[f"{prefix}.lora_B.weight"] * (16 / 8), atol=1e-2)
    assert v_layer_1.b.shape == (64, 8)


def test_unpacking_checks_the_layout_against_the_model() -> None:
    weights, config = pack_adapter(
        {
            "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.ones((2, 128), np.float32),
            "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": np.ones((128, 2), np.float32),
        },
        scale=1.0,
    )
    assert config.tolist() == [[1, 0, 2]]
    with pytest.raises(LoraError, match="layer 5 out of range"):
        unpack_adapter(weights, np.array([[1, 5, 2]], np.int32), SHAPE, 64)
    with pytest.raises(LoraError, match="unknown module id 9"):
        unpack_adapter(weights, np.array([[9, 0, 2]], np.int32), SHAPE, 64)
    with pytest.raises(LoraError, match="needs 768 values per row"):
        unpack_adapter(weights, np.array([[5, 0, 2]], np.int32), SHAPE, 64)  # mlp_h_to_4h is wider
    with pytest.raises(LoraError, match="adapter size 2 must be in"):
        unpack_adapter(weights, config, SHAPE, max_rank=1)
    with pytest.raises(LoraError, match="same number"):
        unpack_adapter(weights, np.zeros((2, 3), np.int32), SHAPE, 64)


def test_a_task_not_cached_and_sent_without_weights_is_the_peft_cache_miss() -> None:
    cache: LoraCache[str] = LoraCache(1)
    with pytest.raises(LoraError) as missed:
        cache.acquire(5, None)
    assert str(missed.value) == "LoRA task 5 not found in cache. Please send LoRA weights with request"


def test_the_least_recently_used_done_task_is_evicted() -> None:
    cache: LoraCache[str] = LoraCache(2)
    for task in (1, 2):
        cache.acquire(task, f"adapter {task}")
        cache.release(task)
    cache.acquire(1, None)
    cache.release(1)
    cache.acquire(3, "adapter 3")
    assert cache.task_ids == [1, 3]


def test_a_cache_whose_tasks_are_all_in_use_is_full() -> None:
    cache: LoraCache[str] = LoraCache(1)
    cache.acquire(1, "one")
    with pytest.raises(LoraError) as full:
        cache.acquire(2, "two")
    assert str(full.value) == CACHE_FULL_MESSAGE
    cache.release(1)
    assert cache.acquire(2, "two") == "two" and 1 not in cache
