"""Counting prompt tokens without holding up the event loop, and without counting twice.

Counting costs about 1 µs per byte (30-80 ms for 100 KB with tiny-llm's tokenizer on the dev box),
and on the event loop that time is taken from every stream the process serves. Planning counts only
when the count can change the request (``token_bound.py``, ``plan/budget.py``); when it must:

- **Off the loop.** ``TokenCounter`` runs counts on a bounded thread pool through
  ``encode_batch_fast``, inside which ``tokenizers`` releases the GIL (measured: a 1 MB ``encode``
  kept the loop thread from running for the whole 1.1 s; with ``encode_batch_fast`` on a thread the
  loop thread ran throughout). Prompts up to ``INLINE_MAX_CHARS`` are counted in place: the hop to a
  thread (~80 µs round trip) costs more than their count.
- **Once per stretch of text.** Many requests share a long system prompt, and agents resend a
  growing conversation every turn. A tokenizer splits its input at special tokens before anything
  else, and tokenizes the stretches between them independently, so a prompt's count is the sum of
  its stretches' counts (+1 per special token, + what the post-processor adds). ``PromptTokenizer``
  caches stretch counts (``CountCache``: least recently used out, bounded in bytes) and tokenizes
  only the stretches it has not seen: 20 turns of a conversation with a 20 KB system prompt took
  52 ms of counting instead of 567 ms (tiny-llm's tokenizer). It splits only at special tokens where
  the sum is exact (``split_markers``); property tests compare it with counting the whole prompt.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from gateway.models.token_bound import TokenBound, spec_parts, token_bound, tokenizer_spec

_T = TypeVar("_T")
_A = TypeVar("_A")

INLINE_MAX_CHARS = 1024
"""Prompts up to this many characters are counted on the calling thread: ~0.15 ms with tiny-llm's
tokenizer, about what the thread hop alone costs."""

MIN_CACHED_CHARS = 64
"""Shorter stretches ("user\\n" between two markers) are recounted: cheaper than the cache's bookkeeping."""


def count_tokens(tokenizer: Any, prompt: str) -> int:
    """Tokens of ``prompt`` as ``len(tokenizer.encode(prompt).ids)`` counts them (special tokens
    added), through ``encode_batch_fast``: the same ids, without the GIL and without char offsets."""
    return len(tokenizer.encode_batch_fast([prompt])[0])


def split_markers(tokenizer: Any, spec: Mapping[str, Any]) -> re.Pattern[str] | None:
    """The special tokens a count can be split at, as one pattern; None: count whole prompts.

    A marker is a special added token matched on the raw text (not normalized) that eats no
    whitespace around it (no ``lstrip``/``rstrip``) and overlaps no other added token, so the
    tokenizer splits the whole prompt exactly where the pattern does. Not at all when a token
    needs word boundaries (``single_word``: a stretch's edge is not the prompt's), when a
    Metaspace pre-tokenizer prefixes only the prompt's first stretch (``prepend_scheme: first``),
    when special tokens are tokenized as text, or with padding or truncation configured.
    """
    if tokenizer.padding is not None or tokenizer.truncation is not None:
        return None
    if getattr(tokenizer, "encode_special_tokens", False):
        return None
    for part in spec_parts(spec.get("pre_tokenizer"), "pretokenizers"):
        if part.get("type") == "Metaspace" and part.get("prepend_scheme") == "first":
            return None
    added = [token for token in spec.get("added_tokens") or () if token.get("content")]
    if any(token.get("single_word") for token in added):
        return None
    contents = {str(token["content"]) for token in added}
    markers = [
        str(token["content"])
        for token in added
        if token.get("special") and not token.get("normalized") and not token.get("lstrip") and not token.get("rstrip")
    ]
    markers = [m for m in markers if not any(_overlap(m, other) for other in contents if other != m)]
    if not markers:
        return None
    return re.compile("|".join(re.escape(m) for m in sorted(set(markers), key=len, reverse=True)))


def _overlap(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` could match overlapping text (one inside the other, or an end of
    one being a start of the other)."""
    if a in b or b in a:
        return True
    return any(a.endswith(b[:k]) for k in range(1, len(b))) or any(b.endswith(a[:k]) for k in range(1, len(a)))


class CountCache:
    """Token counts of prompt stretches, per tokenizer, least recently used first out, holding at most
    ``max_bytes`` of cached text (``sys.getsizeof`` of each key). Shared by every model's tokenizer
    and used from the counting threads, hence the lock (held for dictionary work only)."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._counts: OrderedDict[tuple[int, str], int] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, owner: int, texts: list[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        with self._lock:
            for text in texts:
                count = self._counts.get((owner, text))
                if count is not None:
                    self._counts.move_to_end((owner, text))
                    found[text] = count
        return found

    def put(self, owner: int, counts: Mapping[str, int]) -> None:
        with self._lock:
            for text, count in counts.items():
                size = sys.getsizeof(text)
                if size > self._max_bytes or (owner, text) in self._counts:
                    continue
                self._counts[(owner, text)] = count
                self._bytes += size
                while self._bytes > self._max_bytes:
                    (_, evicted), _ = self._counts.popitem(last=False)
                    self._bytes -= sys.getsizeof(evicted)

    @property
    def cached_bytes(self) -> int:
        return self._bytes


_OWNERS = itertools.count()


class PromptTokenizer:
    """A model's tokenizer as planning counts with it: its length bound, and its counts of the
    stretches between special tokens, cached (``cache`` None: every prompt counted whole)."""

    def __init__(self, tokenizer: Any, cache: CountCache | None = None) -> None:
        spec = tokenizer_spec(tokenizer)
        self.tokenizer = tokenizer
        self.bound: TokenBound | None = token_bound(tokenizer, spec)
        self._markers = split_markers(tokenizer, spec) if cache is not None else None
        self._specials = int(tokenizer.num_special_tokens_to_add(False))
        self._cache = cache
        self._owner = next(_OWNERS)

    def count(self, prompt: str) -> int:
        """The prompt's count, as ``count_tokens`` gives it. Blocking (without the GIL while the
        tokenizer runs): call it on a thread for a long prompt."""
        cache, markers = self._cache, self._markers
        if cache is None or markers is None or len(prompt) <= INLINE_MAX_CHARS:
            return count_tokens(self.tokenizer, prompt)
        stretches = markers.split(prompt)
        long_ones = [s for s in stretches if len(s) >= MIN_CACHED_CHARS]
        known = cache.get(self._owner, long_ones)
        todo = list({s for s in stretches if s and s not in known})
        fresh = dict(zip(todo, map(len, self.tokenizer.encode_batch_fast(todo, add_special_tokens=False)), strict=True))
        cache.put(self._owner, {s: n for s, n in fresh.items() if len(s) >= MIN_CACHED_CHARS})
        counts = known | fresh
        return sum(counts[s] for s in stretches if s) + len(stretches) - 1 + self._specials


class TokenCounter:
    """Runs prompt counts on a bounded pool of threads (``tokenizer_threads``)."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None

    async def count(self, count: Callable[[str], _T], prompt: str) -> _T:
        """``count(prompt)``, in place for a short prompt, else on a pool thread (a count, or
        the token ids themselves: embeddings' truncation)."""
        return await self.run(count, prompt, len(prompt))

    async def run(self, work: Callable[[_A], _T], argument: _A, chars: int) -> _T:
        """Any tokenizer work (the ids of ``/tokenize``, the text of ``/detokenize``), placed as
        ``count`` is by ``chars``, the length of the text it reads or writes."""
        if chars <= INLINE_MAX_CHARS:
            return work(argument)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="gateway-tokenize")
        return await asyncio.get_running_loop().run_in_executor(self._pool, work, argument)

    def close(self) -> None:
        """Stop the threads; counts still queued are cancelled (their requests are gone)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
