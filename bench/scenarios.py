"""The workloads, as data: one row per scenario, each run against the floor and every variant.

Every scenario streams from the ``firehose`` test model (``tests/triton_models``): it sends
``max_tokens`` responses of ``"tok "`` as fast as its Python backend can, so the figures are the
gateway's, not a language model's. Its ``model.json`` names tiny-llm's tokenizer and chat
template and a context of 1,000,000 tokens, so the gateway renders and plans for it as for a
real model. Tokens are counted by content (characters / 4), so coalesced chunks count fairly.

Prompts are words drawn with a fixed seed, ASCII, as a retrieved context would be.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FIREHOSE_TOKEN = "tok "  # tests/triton_models/firehose/1/model.py: TOKEN = b"tok "
WORDS_SEED = 13


@dataclass(frozen=True)
class Scenario:
    """One workload. ``concurrency`` is the default list of levels (``--concurrency`` overrides)."""

    name: str
    what: str
    path: str
    prompt_bytes: int
    tokens: int
    concurrency: tuple[int, ...]
    stream: bool = True
    seed: int = WORDS_SEED + 2

    @property
    def prompt(self) -> str:
        return prompt_text(self.prompt_bytes, self.seed)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("chat", "chat completions, 10 KB prompt, 1000-token streams", CHAT, 10_000, 1000, (1, 16, 64)),
    Scenario("chat-256", "the chat workload at 256 streams", CHAT, 10_000, 1000, (256,)),
    Scenario("completions", "completions, 100 B prompt, 64-token streams", COMPLETIONS, 100, 64, (1, 16, 64)),
    Scenario("short-chat", "chat completions, 100 B prompt, 64-token streams", CHAT, 100, 64, (1, 16, 64)),
    Scenario("chat-json", "chat completions not streamed, 10 KB prompt, 64 tokens", CHAT, 10_000, 64, (16,), False),
)
"""``load``'s table. ``chat`` is the workload the figures in docs/PERFORMANCE.md are quoted on."""


def scenario(name: str) -> Scenario:
    for row in SCENARIOS:
        if row.name == name:
            return row
    raise SystemExit(f"no scenario {name!r}; known: {', '.join(s.name for s in SCENARIOS)}")


def sweep_scenarios(sizes: list[int], tokens: int) -> list[Scenario]:
    """``prompts``' sweep: both endpoints at c = 1 by prompt size, short streams, so the first
    token measures the request path rather than the stream before it."""
    return [
        Scenario(
            f"{endpoint}-{size}B", f"{endpoint}, {size:,} B prompt, c = 1", path, size, tokens, (1,), seed=WORDS_SEED
        )
        for endpoint, path in (("completions", COMPLETIONS), ("chat", CHAT))
        for size in sizes
    ]


def prompt_text(size: int, seed: int = WORDS_SEED) -> str:
    """``size`` bytes of lowercase words and spaces, the same for the same seed."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(3000)]
    words: list[str] = []
    length = 0
    while length < size:
        words.append(rng.choice(vocabulary))
        length += len(words[-1]) + 1
    return " ".join(words)[:size]


def paced_script(tokens: int, delay: float) -> str:
    """A ``scripted``-model prompt: ``tokens`` responses of ``"tok "``, ``delay`` seconds apart."""
    return json.dumps({"responses": [{"utf8": [FIREHOSE_TOKEN], "delay": delay}] * tokens})
