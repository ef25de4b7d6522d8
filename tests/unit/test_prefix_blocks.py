"""The prefix cache the test-only ``prefix_cache`` model simulates (tests/triton_models/prefix_cache/1/prefix_blocks.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

MODEL_VERSION_DIR = Path(__file__).resolve().parents[1] / "triton_models" / "prefix_cache" / "1"
if str(MODEL_VERSION_DIR) not in sys.path:
    sys.path.insert(0, str(MODEL_VERSION_DIR))

from prefix_blocks import PrefixCache, block_hashes, session_of  # noqa: E402


def test_only_full_blocks_are_hashed() -> None:
    assert len(block_hashes("a" * 47, 16)) == 2
    assert len(block_hashes("a" * 48, 16)) == 3
    assert block_hashes("a" * 15, 16) == []


def test_a_block_hash_covers_everything_before_it() -> None:
    one = block_hashes("x" * 16 + "same block text!", 16)
    two = block_hashes("y" * 16 + "same block text!", 16)
    assert one[1] != two[1]  # same text, different prefix: no shared block


def test_same_prompt_twice_hits_its_full_blocks() -> None:
    cache = PrefixCache(capacity_blocks=100, block_chars=16)
    prompt = "p" * 40
    first, second = cache.admit(prompt), cache.admit(prompt)
    assert (first.prompt_chars, first.cached_chars) == (40, 0)
    assert (second.prompt_chars, second.cached_chars, second.uncached_chars) == (40, 32, 8)


def test_shared_prefix_hits_up_to_the_first_differing_block() -> None:
    cache = PrefixCache(capacity_blocks=100, block_chars=4)
    cache.admit("aaaabbbbccccdddd")
    assert cache.admit("aaaabbbbcXccdddd").cached_chars == 8
    assert cache.admit("Xaaabbbbccccdddd").cached_chars == 0  # later blocks match only with their prefix


def test_inserted_continuation_is_found_by_the_next_turn() -> None:
    cache = PrefixCache(capacity_blocks=100, block_chars=4)
    cache.admit("turn one")
    cache.insert("turn one" + "answer")
    assert cache.admit("turn one" + "answer" + " turn two").cached_chars == 12


def test_lru_evicts_the_least_recent_chain_tail_first() -> None:
    cache = PrefixCache(capacity_blocks=4, block_chars=2)
    cache.admit("aabbcc")  # 3 blocks
    cache.admit("xxyy")  # 2 more: one of "aabbcc"'s goes, its tail
    assert len(cache) == 4 and cache.evicted_blocks == 1
    assert cache.admit("aabbcc").cached_chars == 4  # head kept, tail lost


def test_refreshed_chain_survives_pressure() -> None:
    cache = PrefixCache(capacity_blocks=4, block_chars=2)
    cache.admit("aabb")
    cache.admit("ccdd")
    cache.admit("aabb")  # refreshed: now "ccdd" is the oldest
    cache.admit("eeff")
    assert cache.admit("aabb").cached_chars == 4
    assert cache.admit("ccdd").cached_chars == 0


@pytest.mark.parametrize(
    ("prompt", "session"),
    [
        ("system\nuser: session:conv-17 hello", "conv-17"),
        ("session:a_b-9.rest session:other", "a_b-9"),
        ("no marker", None),
        ("session: spaced", None),
    ],
)
def test_session_marker(prompt: str, session: str | None) -> None:
    assert session_of(prompt) == session


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        PrefixCache(capacity_blocks=0, block_chars=16)
