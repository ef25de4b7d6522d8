"""Prefix-block bookkeeping for the perf outputs (tests/trtllm_stand_ins/kv_blocks.py)."""

from __future__ import annotations

from tests.trtllm_stand_ins.kv_blocks import BlockCache, BlockStats, block_keys


def test_blocks_are_reused_only_after_the_same_prefix_and_never_the_last_prompt_token() -> None:
    cache = BlockCache(block_size=4)
    prompt = list(range(9))
    assert cache.reusable(prompt, None) == 0
    cache.store([*prompt, 100, 101, 102], None)
    assert cache.reusable(prompt, None) == 2  # blocks 0-3 and 4-7; token 8 is recomputed
    assert cache.reusable(list(range(8)), None) == 1  # the block holding the last token is not reused
    assert cache.reusable([0, 1, 2, 3, 9, 9, 9, 9, 9], None) == 1
    assert cache.reusable([5, *prompt[1:]], None) == 0


def test_blocks_are_keyed_by_the_lora_task_too() -> None:
    cache = BlockCache(block_size=2)
    cache.store([1, 2, 3, 4, 5], 7)
    assert cache.reusable([1, 2, 3, 4, 5], 7) == 2
    assert cache.reusable([1, 2, 3, 4, 5], None) == 0


def test_stats_count_every_block_of_the_sequence_so_far() -> None:
    assert BlockCache(block_size=4).stats(reused=2, sequence_length=13) == BlockStats(reused=2, new=2, total=4)


def test_the_oldest_blocks_go_past_capacity() -> None:
    cache = BlockCache(block_size=1, capacity=3)
    cache.store([1, 2, 3], None)
    cache.store([9], None)
    assert cache.reusable([1, 2, 3, 4], None) == 0  # the root block of [1, ...] was evicted first


def test_keys_chain_so_equal_blocks_after_different_prefixes_differ() -> None:
    assert block_keys([1, 2, 3, 4], 2, None)[1] != block_keys([9, 9, 3, 4], 2, None)[1]
