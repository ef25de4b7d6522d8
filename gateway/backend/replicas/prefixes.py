"""What each replica has recently prefilled, approximately: the prefix route's memory.

A replica's prefix (KV) cache holds the prompts it computed lately, in blocks. The router cannot
see it, but it knows which prompts it sent where, so it keeps, per replica, an LRU of the chained
hashes of those prompts' blocks (a block's hash covers every character before it, so a block
found means the whole prefix up to it is there). A new prompt goes where the longest run of its
leading blocks is found: the turn of a conversation where its previous turn ran, a question
behind a shared system prompt where that prompt is warm. This is the approximate tree that
SGLang's cache-aware router and the Inference Extension's prefix scorer keep; consistent hashing
of one fixed-size prefix cannot do it (every conversation behind one long system prompt would get
one key, and one replica).

Python's ``hash`` is salted per process: that is fine here, the table never leaves the process.
Each worker learns from the requests it routes; session keys (``ring.py``) are what every
process agrees on without learning.
"""

from __future__ import annotations

from collections import OrderedDict

BLOCK_CHARS = 256
"""Characters per block: about 64 tokens, a few of vLLM's 16-token KV blocks. Coarser blocks cost
less to hash and look up; finer ones would tell apart prompts that diverge within a block, which
matters little at this size."""

TABLE_BLOCKS = 32768
"""Blocks remembered per replica (about 8 M characters of prompts; a few MB of memory)."""


def block_hashes(text: str, block: int = BLOCK_CHARS) -> list[int]:
    """Chained hashes of ``text``'s full blocks: the i-th covers ``text[: (i + 1) * block]``."""
    hashes: list[int] = []
    chained = 0
    for start in range(0, len(text) - block + 1, block):
        chained = hash((chained, text[start : start + block]))
        hashes.append(chained)
    return hashes


class PrefixTable:
    """One replica's remembered blocks, least recently routed first out."""

    __slots__ = ("_blocks", "_capacity")

    def __init__(self, capacity: int = TABLE_BLOCKS) -> None:
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._capacity = capacity

    def matched(self, hashes: list[int]) -> int:
        """How many leading blocks of a prompt this replica has seen."""
        blocks = self._blocks
        count = 0
        for value in hashes:
            if value not in blocks:
                break
            count += 1
        return count

    def add(self, hashes: list[int]) -> None:
        """Remember a prompt's blocks, its first ones freshest: a prompt's tail is evicted before
        its head, as a prefix cache loses it (a missing head would hide the whole chain)."""
        blocks = self._blocks
        for value in reversed(hashes):
            if value in blocks:
                blocks.move_to_end(value)
            else:
                blocks[value] = None
        while len(blocks) > self._capacity:
            blocks.popitem(last=False)

    def __len__(self) -> int:
        return len(self._blocks)
