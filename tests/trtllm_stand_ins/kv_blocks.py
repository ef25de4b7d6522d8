"""KV-cache block bookkeeping for ``return_perf_metrics``: which blocks a request reuses.

The stand-in computes every token afresh; this only counts what TensorRT-LLM's paged KV cache
with block reuse would report, so a client's ``cached_tokens`` (reused blocks x block size) can be
tested. A block is ``block_size`` consecutive tokens (model parameter ``stand_in_kv_block_size``,
default 4, tiny so that short test prompts span several); its key chains the keys of the blocks
before it and the LoRA task, so a block is reused only after the same prefix under the same
adapter. A request reuses the leading full blocks of its prompt that are cached, never the block
holding the prompt's last token (the model must compute at least one position); when it finishes,
the full blocks of its prompt and output are stored. Least recently used blocks go first past
``capacity``. Pure; used by the scheduler thread only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class BlockStats:
    reused: int
    new: int
    total: int


def block_keys(tokens: Sequence[int], block_size: int, lora_task: int | None) -> list[int]:
    """The chained key of every full block of ``tokens``."""
    keys, parent = [], hash(("root", lora_task))
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start : start + block_size])))
        keys.append(parent)
    return keys


class BlockCache:
    def __init__(self, block_size: int = 4, capacity: int = 4096) -> None:
        if block_size < 1:
            raise ValueError("stand_in_kv_block_size must be >= 1")
        self.block_size = block_size
        self.capacity = capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def reusable(self, prompt: Sequence[int], lora_task: int | None) -> int:
        """Leading cached blocks of ``prompt`` (its last token excluded); refreshes them."""
        reused = 0
        for key in block_keys(prompt[:-1], self.block_size, lora_task):
            if key not in self._blocks:
                break
            self._blocks.move_to_end(key)
            reused += 1
        return reused

    def store(self, tokens: Sequence[int], lora_task: int | None) -> None:
        for key in block_keys(tokens, self.block_size, lora_task):
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)

    def stats(self, reused: int, sequence_length: int) -> BlockStats:
        """Counts for a request of ``sequence_length`` tokens so far that reused ``reused`` blocks."""
        total = -(-sequence_length // self.block_size)
        return BlockStats(reused=reused, new=total - reused, total=total)
