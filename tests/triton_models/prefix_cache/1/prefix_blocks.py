"""The prefix cache the ``prefix_cache`` model simulates: pure Python, importable without Triton.

Why it is shaped like vLLM's automatic prefix caching: the benchmark of replica routing asks how
much of each prompt a replica could have skipped, and the answer depends on the same details
vLLM's cache has. The text is cut into fixed blocks; a block's hash covers its own text *and* the
hash of the block before it, so finding a block means the whole prefix up to it matched (two
prompts that share block 5's text but differ earlier never share block 5). Only full blocks are
cached; the cached prefix of a prompt is the leading run of its blocks found in the cache. Blocks
live in an LRU of bounded capacity, so a replica that sees every conversation (round robin) evicts
what one that sees a third of them (affinity) keeps.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

_SESSION = re.compile(r"session:([A-Za-z0-9_-]+)")


def block_hashes(text: str, block_chars: int) -> list[bytes]:
    """Chained hashes of the full ``block_chars``-character blocks of ``text`` (the tail is dropped)."""
    hashes: list[bytes] = []
    previous = b""
    for start in range(0, len(text) - block_chars + 1, block_chars):
        block = text[start : start + block_chars].encode("utf-8", errors="surrogatepass")
        previous = hashlib.blake2b(previous + block, digest_size=16).digest()
        hashes.append(previous)
    return hashes


def session_of(text: str) -> str | None:
    """The token after the first ``session:`` in the prompt, for the per-request log line."""
    match = _SESSION.search(text)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Lookup:
    """What one prompt found in the cache."""

    prompt_chars: int
    cached_chars: int

    @property
    def uncached_chars(self) -> int:
        return self.prompt_chars - self.cached_chars


class PrefixCache:
    """An LRU of chained block hashes, shared by every request of one model instance (thread-safe)."""

    def __init__(self, capacity_blocks: int, block_chars: int) -> None:
        if capacity_blocks < 1 or block_chars < 1:
            raise ValueError("capacity_blocks and block_chars must be positive")
        self.capacity_blocks = capacity_blocks
        self.block_chars = block_chars
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self.evicted_blocks = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def admit(self, prompt: str) -> Lookup:
        """Measure the cached prefix of ``prompt``, then insert or refresh all its blocks.

        Both happen under one lock, as a scheduler allocates a request's blocks at once: a second
        request with the same prompt arriving a moment later finds them.
        """
        hashes = block_hashes(prompt, self.block_chars)
        with self._lock:
            hit = 0
            while hit < len(hashes) and hashes[hit] in self._blocks:
                hit += 1
            self._insert(hashes)
        return Lookup(prompt_chars=len(prompt), cached_chars=hit * self.block_chars)

    def insert(self, text: str) -> None:
        """Insert or refresh every full block of ``text`` (the prompt followed by what was generated)."""
        hashes = block_hashes(text, self.block_chars)
        with self._lock:
            self._insert(hashes)

    def _insert(self, hashes: list[bytes]) -> None:
        """Refresh the chain from its tail to its head, so its head is the most recently used: under
        pressure a chain loses its tail first and keeps its prefix useful (vLLM frees a request's
        blocks in the same order)."""
        blocks = self._blocks
        for digest in reversed(hashes):
            if digest in blocks:
                blocks.move_to_end(digest)
            else:
                blocks[digest] = None
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
            self.evicted_blocks += 1
