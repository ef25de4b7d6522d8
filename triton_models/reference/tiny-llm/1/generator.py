"""The token loop of one request: ``n`` sequences advanced one token per ``step()``.

Why a step function and not a loop: the scheduler interleaves all active requests one step at a
time (so 16 streams progress together and a cancel is seen between any two tokens), and streaming
sends exactly one response per step. Each sequence has its own KV cache and its own
``torch.Generator``: its tokens depend only on the prompt, the parameters and its seed, never on
what else runs.

Finish rules, in this order of precedence for the token just generated:
EOS (any id of generation_config's ``eos_token_id``, unless ``ignore_eos``) or a ``stop_token_ids``
token -> "stop" (the token counts, its text is dropped unless ``include_stop_str_in_output``);
a stop string -> "stop"; a token that completes the structured-output grammar -> "stop";
``max_tokens`` or ``max_model_len`` reached -> "length".
EOS, stop tokens and stop strings are disabled until ``min_tokens`` tokens exist.

``allowed_token_ids`` masks every other token, and ``bad_words`` bans the tokens that would
complete one (bad_words.py), both before ``logit_bias`` and the penalties, as vLLM's sampler
masks them first.

Structured outputs (``params.structured``, grammar.py): each sequence has its own matcher; its mask
comes first (as vLLM applies its bitmask before the sampler), EOS is allowed only where the grammar
accepts (never with ``ignore_eos``), and a token that completes the grammar ends the sequence with
"stop" (before the "length" check, as every stop).

Replay (``resume_token_ids``: the tokens a request already generated on a replica that failed):
each id goes through the very step that generated it, with the drawn token replaced by the id.
So the KV cache gets the same forward calls, the stop-string buffer the same bytes (its sent mark
moves as if each step's delta had been sent), counts, ``min_tokens``, bad words and the grammar
see the id as output, and a seeded generator is advanced by the same draw, whose result is
discarded. Everything after the replay is then bit-identical to the uninterrupted run. The ids are
not checked against the masks (they are this model's own output); only the grammar can refuse one.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from bad_words import bad_word_token_ids, banned_tokens
from engine import TinyLlmEngine
from grammar import GrammarError, TokenMatcher
from sampler import apply_logit_bias, apply_penalties, ban_tokens, choose_token, logprob_entry
from sampling_params import SamplingParams
from stop import StopTextBuffer

FINISH_STOP = "stop"
FINISH_LENGTH = "length"

_SEED_STRIDE = 0x9E3779B97F4A7C15  # odd 64-bit constant: spreads sibling seeds apart


class PromptTooLongError(ValueError):
    """The prompt leaves no room for a single generated token."""


class ReplayError(ValueError):
    """A resumed id the structured-output grammar does not allow there (the request's error)."""


def sequence_seed(seed: int | None, index: int) -> int:
    """Seed of sequence ``index``: sequence 0 uses the request seed itself, so ``n=1`` and the first
    of ``n=2`` agree; siblings get distinct derived seeds. No seed: fresh OS entropy."""
    if seed is None:
        return int.from_bytes(os.urandom(8), "little") >> 1
    return (seed + index * _SEED_STRIDE) % (1 << 63)


@dataclass(frozen=True)
class SequenceDelta:
    """What one step (or, non-streaming, the whole generation) added to one sequence."""

    text: bytes
    num_tokens: int
    logprobs: list[dict[str, dict[str, Any]]] | None
    cumulative_logprob: float
    finish_reason: str | None
    token_ids: tuple[int, ...] = ()
    """The ids of the ``num_tokens`` new tokens."""


@dataclass
class _Sequence:
    generator: torch.Generator | None
    counts: torch.Tensor
    text: StopTextBuffer
    pending: list[int]
    matcher: TokenMatcher | None = None
    cache: Any = None
    token_ids: list[int] = field(default_factory=list)
    cumulative_logprob: float = 0.0
    finish_reason: str | None = None
    new_token_ids: list[int] = field(default_factory=list)
    new_logprobs: list[dict[str, dict[str, Any]]] = field(default_factory=list)


class Generation:
    """One request's sequences; call ``step()`` until ``finished``."""

    def __init__(
        self,
        engine: TinyLlmEngine,
        prompt_ids: list[int],
        params: SamplingParams,
        resume_token_ids: Sequence[int] = (),
    ) -> None:
        max_model_len = engine.config.max_model_len
        if not prompt_ids:
            raise PromptTooLongError("The decoder prompt cannot be empty")
        if len(prompt_ids) >= max_model_len:
            raise PromptTooLongError(
                f"The decoder prompt (length {len(prompt_ids)}) is longer than the maximum model length "
                f"of {max_model_len}."
            )
        self._engine = engine
        self.params = params
        self.prompt_ids = prompt_ids
        room = max_model_len - len(prompt_ids)
        self.max_tokens = room if params.max_tokens is None else min(params.max_tokens, room)
        self._prompt_mask = torch.zeros(engine.vocab_size, dtype=torch.bool)
        self._prompt_mask[torch.tensor(prompt_ids, dtype=torch.long)] = True
        self._stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else engine.eos_token_ids)
        self._grammar = None if params.structured is None else engine.compile_grammar(params.structured)
        self._bad_words = bad_word_token_ids(params.bad_words, engine.encode_text)
        self._disallowed: torch.Tensor | None = None
        if params.allowed_token_ids is not None:
            self._disallowed = torch.ones(engine.vocab_size, dtype=torch.bool)
            self._disallowed[torch.tensor(params.allowed_token_ids, dtype=torch.long)] = False
        self.sequences = [self._new_sequence(index) for index in range(params.n)]
        if resume_token_ids and params.n != 1:
            raise ValueError("resume_token_ids continue one sequence (n = 1)")
        self._replay: deque[int] = deque(resume_token_ids)
        self._replayed = 0

    def _new_sequence(self, index: int) -> _Sequence:
        generator = None
        if not self.params.greedy:
            generator = torch.Generator().manual_seed(sequence_seed(self.params.seed, index))
        return _Sequence(
            generator=generator,
            counts=torch.zeros(self._engine.vocab_size, dtype=torch.float32),
            text=StopTextBuffer(self.params.stop, self.params.include_stop_str_in_output),
            pending=list(self.prompt_ids),
            matcher=None if self._grammar is None else self._grammar.matcher(),
        )

    @property
    def finished(self) -> bool:
        return all(sequence.finish_reason is not None for sequence in self.sequences)

    @property
    def replaying(self) -> bool:
        """Whether resumed ids remain to replay (``step()`` refuses to run until none remain)."""
        return bool(self._replay)

    @property
    def tokens_held(self) -> int:
        """Tokens in the KV caches of the unfinished sequences (prompt and output)."""
        return sum(len(self.prompt_ids) + len(s.token_ids) for s in self.sequences if s.finish_reason is None)

    def replay(self, limit: int) -> None:
        """Replay up to ``limit`` resumed ids, each one decode step; their deltas are dropped.

        When a replayed id ends the sequence (EOS, a stop, ``max_tokens``), the ids after it are
        dropped and the next ``step()`` returns the empty final delta with the finish reason."""
        sequence = self.sequences[0]
        for _ in range(min(limit, len(self._replay))):
            token = self._replay.popleft()
            try:
                self._advance(sequence, forced=token)
            except GrammarError:
                raise ReplayError(
                    f"input 'resume_token_ids': id {token} at position {self._replayed} is not allowed there "
                    "by the structured-output grammar"
                ) from None
            self._replayed += 1
            self._take_delta(sequence)
            if sequence.finish_reason is not None:
                self._replay.clear()
                return

    def step(self) -> list[SequenceDelta]:
        """Generate one token for every unfinished sequence; return each sequence's delta."""
        if self._replay:
            raise RuntimeError("step() while resumed ids remain to replay")
        for sequence in self.sequences:
            if sequence.finish_reason is None:
                self._advance(sequence)
        return [self._take_delta(sequence) for sequence in self.sequences]

    def _advance(self, sequence: _Sequence, forced: int | None = None) -> None:
        """One decode step. ``forced``: a replayed id, taken instead of the drawn token (the draw
        still happens, so a seeded generator moves on exactly as it did for that token)."""
        params = self.params
        result = self._engine.forward(sequence.pending, sequence.cache, params.lora_name)
        sequence.cache = result.cache
        raw_logprobs = torch.log_softmax(result.logits, dim=-1)
        logits = result.logits.clone()
        if sequence.matcher is not None:
            sequence.matcher.mask_logits(logits)
            if params.ignore_eos:
                ban_tokens(logits, self._engine.eos_token_ids)  # EOS would complete the grammar early
        if self._disallowed is not None:
            logits.masked_fill_(self._disallowed, -float("inf"))
        if self._bad_words:
            ban_tokens(logits, banned_tokens(self._bad_words, sequence.token_ids))
        apply_logit_bias(logits, params.logit_bias)
        before_min_tokens = len(sequence.token_ids) < params.min_tokens
        if before_min_tokens:
            ban_tokens(logits, self._stop_ids)
        apply_penalties(logits, sequence.counts, self._prompt_mask, params)
        token = choose_token(logits, params, sequence.generator)
        if forced is not None:
            token = forced
        grammar_complete = sequence.matcher is not None and sequence.matcher.accept(token)

        sequence.token_ids.append(token)
        sequence.pending = [token]
        sequence.counts[token] += 1
        sequence.new_token_ids.append(token)
        sequence.cumulative_logprob += float(raw_logprobs[token])
        if params.logprobs is not None and forced is None:
            sequence.new_logprobs.append(logprob_entry(raw_logprobs, token, params.logprobs, self._engine.decode_token))
        stop_token = token in self._stop_ids and not before_min_tokens
        if stop_token:
            sequence.finish_reason = FINISH_STOP
        text = self._token_text(token, stop_token)
        if text and sequence.text.append(text, check_stops=len(sequence.token_ids) >= params.min_tokens):
            sequence.finish_reason = sequence.finish_reason or FINISH_STOP
        if grammar_complete:
            sequence.finish_reason = sequence.finish_reason or FINISH_STOP
        if sequence.finish_reason is None and len(sequence.token_ids) >= self.max_tokens:
            sequence.finish_reason = FINISH_LENGTH
        if sequence.finish_reason is not None:
            sequence.cache = None  # free the KV cache as soon as the sequence is done
            sequence.matcher = None

    def _token_text(self, token: int, stop_token: bool) -> bytes:
        if stop_token and not self.params.include_stop_str_in_output:
            return b""
        if self.params.skip_special_tokens and token in self._engine.special_token_ids:
            return b""
        return self._engine.token_bytes[token]

    def _take_delta(self, sequence: _Sequence) -> SequenceDelta:
        delta = SequenceDelta(
            text=sequence.text.take_delta(final=sequence.finish_reason is not None),
            num_tokens=len(sequence.new_token_ids),
            logprobs=list(sequence.new_logprobs) if self.params.logprobs is not None else None,
            cumulative_logprob=sequence.cumulative_logprob,
            finish_reason=sequence.finish_reason,
            token_ids=tuple(sequence.new_token_ids),
        )
        sequence.new_token_ids.clear()
        sequence.new_logprobs.clear()
        return delta


def merge_deltas(earlier: SequenceDelta | None, later: SequenceDelta) -> SequenceDelta:
    """Fold consecutive deltas of one sequence into one (how non-streaming builds its single response)."""
    if earlier is None:
        return later
    logprobs = None
    if earlier.logprobs is not None or later.logprobs is not None:
        logprobs = [*(earlier.logprobs or []), *(later.logprobs or [])]
    return SequenceDelta(
        text=earlier.text + later.text,
        num_tokens=earlier.num_tokens + later.num_tokens,
        logprobs=logprobs,
        cumulative_logprob=later.cumulative_logprob,
        finish_reason=later.finish_reason,
        token_ids=earlier.token_ids + later.token_ids,
    )
