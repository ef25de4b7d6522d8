"""One sequence's token loop, as TensorRT-LLM's executor decides it; one token per ``step()``.

Per step: the guide's mask (if any), bad words, the end id held back until ``min_tokens`` tokens
exist, the embedding bias, then the penalties and the draw (the reference sampler's: repetition
over prompt and output, presence/frequency over the output, then temperature, top-k, top-p and a
draw from the sequence's own seeded generator; greedy by the rule in sampling.py). The log-prob
of the chosen token is taken from the distribution it was drawn from, before top-k/top-p cut it.

Finish rules: the end id (generated but **not** part of the output, as the executor drops it), a
stop word's tokens completing at the end of the output (kept in the output), a guide that can take
no more tokens, or ``max_new_tokens``. Only ``end_id`` ends a sequence: tiny-llm's own EOS list
does not apply here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from numpy.typing import NDArray

from tests.trtllm_stand_ins.engine import Adapter, StandInEngine
from tests.trtllm_stand_ins.reference import use_reference_modules
from tests.trtllm_stand_ins.sampling import SamplingConfig
from tests.trtllm_stand_ins.words import ends_with_any

use_reference_modules()
from bad_words import banned_tokens  # type: ignore[import-not-found]  # noqa: E402
from sampler import apply_penalties, ban_tokens, choose_token  # type: ignore[import-not-found]  # noqa: E402
from sampling_params import SamplingParams  # type: ignore[import-not-found]  # noqa: E402

FINISH_END_ID = "end_id"
FINISH_LENGTH = "length"
FINISH_STOP_WORDS = "stop_words"
FINISH_GUIDE = "guide"

_SEED_STRIDE = 0x9E3779B97F4A7C15


@dataclass(frozen=True)
class GenerationParams:
    max_new_tokens: int
    sampling: SamplingConfig
    end_id: int | None = None
    stop_words: tuple[tuple[int, ...], ...] = ()
    bad_words: tuple[tuple[int, ...], ...] = ()
    embedding_bias: NDArray[Any] | None = None
    grammar: Any = None
    """A compiled guide (the reference's ``CompiledGrammar``), or None."""
    adapter: Adapter | None = None
    context_logits: bool = False
    generation_logits: bool = False
    seed_offset: int = 0


@dataclass(frozen=True)
class TokenStep:
    token: int
    logprob: float
    in_output: bool
    """False for the end id, which ends the sequence but is not returned."""
    logits: torch.Tensor | None = None


def _reference_params(sampling: SamplingConfig) -> Any:
    """The reference sampler's parameters for this config (temperature 0 = argmax)."""
    return SamplingParams(
        temperature=0.0 if sampling.greedy else sampling.temperature,
        top_k=sampling.top_k or 0,
        top_p=1.0 if sampling.top_p is None else sampling.top_p,
        repetition_penalty=sampling.repetition_penalty,
        presence_penalty=sampling.presence_penalty,
        frequency_penalty=sampling.frequency_penalty,
    )


@dataclass
class Sequence:
    """A sequence in progress; the scheduler calls ``step()`` until ``finish_reason`` is set."""

    engine: StandInEngine
    prompt: tuple[int, ...]
    params: GenerationParams
    tokens: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    cumulative_logprob: float = 0.0
    context_logits: torch.Tensor | None = None
    _pending: list[int] = field(default_factory=list)
    _cache: Any = None
    _matcher: Any = None
    _generator: torch.Generator | None = None
    _counts: torch.Tensor | None = None
    _prompt_mask: torch.Tensor | None = None
    _sampler: Any = None

    def __post_init__(self) -> None:
        vocab = self.engine.vocab_size
        self._pending = list(self.prompt)
        self._sampler = _reference_params(self.params.sampling)
        if not self.params.sampling.greedy:
            seed = (self.params.sampling.seed + self.params.seed_offset * _SEED_STRIDE) % (1 << 63)
            self._generator = torch.Generator().manual_seed(seed)
        self._counts = torch.zeros(vocab, dtype=torch.float32)
        self._prompt_mask = torch.zeros(vocab, dtype=torch.bool)
        self._prompt_mask[torch.tensor(self.prompt, dtype=torch.long)] = True
        self._matcher = None if self.params.grammar is None else self.params.grammar.matcher()
        if self.params.max_new_tokens <= 0:
            self.finish_reason = FINISH_LENGTH

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def step(self) -> TokenStep:
        """Generate one token (the sequence must not be finished)."""
        params = self.params
        first = self._cache is None
        result = self.engine.forward(
            self._pending, self._cache, params.adapter, all_logits=first and params.context_logits
        )
        self._cache = result.cache
        if result.all_logits is not None:
            self.context_logits = result.all_logits
        logits = result.logits.clone()
        self._constrain(logits)
        apply_penalties(logits, self._counts, self._prompt_mask, self._sampler)
        scaled = logits if params.sampling.greedy else logits / self._sampler.temperature
        logprobs = torch.log_softmax(scaled, dim=-1)
        token = choose_token(logits, self._sampler, self._generator)
        return self._accept(token, float(logprobs[token]), result.logits if params.generation_logits else None)

    def _constrain(self, logits: torch.Tensor) -> None:
        params = self.params
        if self._matcher is not None:
            self._matcher.mask_logits(logits)
        if params.bad_words:
            ban_tokens(logits, banned_tokens(params.bad_words, self.tokens))
        if params.end_id is not None and len(self.tokens) < params.sampling.min_tokens:
            ban_tokens(logits, [params.end_id])
        if params.embedding_bias is not None and params.embedding_bias.size == logits.numel():
            logits += torch.from_numpy(params.embedding_bias)

    def _accept(self, token: int, logprob: float, logits: torch.Tensor | None) -> TokenStep:
        params = self.params
        self._pending = [token]
        self.cumulative_logprob += logprob if math.isfinite(logprob) else 0.0
        guide_done = self._matcher is not None and self._matcher.accept(token)
        if token == params.end_id:
            self._finish(FINISH_END_ID)
            return TokenStep(token, logprob, in_output=False, logits=logits)
        self.tokens.append(token)
        assert self._counts is not None
        self._counts[token] += 1
        if ends_with_any(self.tokens, params.stop_words):
            self._finish(FINISH_STOP_WORDS)
        elif guide_done:
            self._finish(FINISH_GUIDE)
        elif len(self.tokens) >= params.max_new_tokens:
            self._finish(FINISH_LENGTH)
        return TokenStep(token, logprob, in_output=True, logits=logits)

    def _finish(self, reason: str) -> None:
        self.finish_reason = reason
        self._cache = None  # free the KV cache as soon as the sequence is done
        self._matcher = None
