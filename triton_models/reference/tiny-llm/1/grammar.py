"""Structured outputs enforced: a constraint → an llguidance grammar → one token matcher per sequence.

Why llguidance (docs/DEPENDENCIES.md has the trial): JSON schema, regex and Lark grammars (GBNF
converted) in one Rust engine with no Python dependencies; strict JSON (no raw control characters
in strings); a schema's integer and length bounds are honoured; about 0.1 ms per token for mask and
advance against a ~1 ms step (docs/PERFORMANCE.md). It is one of vLLM's structured-output back
ends (``guidance``).

How it is used:

- the grammar is compiled once per request, in Triton's ``execute`` thread, so a bad schema, regex
  or grammar is an INVALID_ARG answer before anything is queued; each sequence then gets its own
  copy of the compiled matcher (``n`` > 1: every sequence follows the grammar on its own);
- every step, the matcher's bitmask of allowed next tokens sets every other logit to -inf before
  the sampler's own processing, as vLLM applies its bitmask; logprobs stay the model's raw ones;
- EOS is in the mask only where the grammar accepts, and when the grammar can take no more tokens
  the sequence ends (finish "stop") without spending a step on the EOS token;
- JSON is generated compact (no whitespace between tokens: ``","`` and ``":"``): whitespace the
  grammar allowed anywhere would let a random-weight model pad its JSON until ``max_tokens``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import llguidance
import numpy as np
import torch
from structured_outputs import StructuredOutputs

_JSON_OPTIONS: Any = {"whitespace_flexible": False}
_WHAT = {
    "json": "JSON schema",
    "json_object": "JSON object grammar",
    "regex": "regex",
    "choice": "choice",
    "grammar": "grammar (Lark, or GBNF converted to Lark)",
}


class GrammarError(ValueError):
    """The constraint does not compile (the message goes back to the client), or, while generating,
    the matcher refused a token it had allowed (a bug: that request fails)."""


def build_grammar_tokenizer(hf_tokenizer: Any, vocab_size: int, eos_token_ids: Iterable[int]) -> Any:
    """llguidance's view of the model's tokenizer (about 10 ms: built once, with the engine).

    ``eos_token_ids`` are every EOS of generation_config, so any of them may end an accepted grammar.
    ``llguidance.hf`` is imported here, not with the module: it imports transformers (seconds of
    load), which a user of ``TokenMatcher`` alone need not pay for."""
    import llguidance.hf

    return llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab_size, eos_token=sorted(eos_token_ids))


def grammar_text(constraint: StructuredOutputs) -> str:
    """The llguidance grammar for one constraint (not yet checked: see ``CompiledGrammar``)."""
    kind, spec = constraint.kind, constraint.spec
    if kind == "json":
        return str(llguidance.LLMatcher.grammar_from_json_schema(spec, defaults=_JSON_OPTIONS))
    if kind == "json_object":
        return str(llguidance.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=_JSON_OPTIONS))
    if kind == "regex":
        return str(llguidance.LLMatcher.grammar_from_regex(spec))
    if kind == "choice":
        return str(llguidance.grammar_from("choice", list(spec)))  # type: ignore[arg-type]
    return str(llguidance.grammar_from("grammar", spec))


class TokenMatcher:
    """One sequence's position in the grammar: masks its logits, follows its tokens."""

    __slots__ = ("_matcher", "_vocab_size")

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        self._matcher = matcher
        self._vocab_size = vocab_size

    def mask_logits(self, logits: torch.Tensor) -> None:
        """Set the logit of every token the grammar does not allow next to -inf, in place."""
        words = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(words, count=self._vocab_size, bitorder="little")
        logits.masked_fill_(torch.from_numpy(allowed) == 0, -math.inf)

    def accept(self, token: int) -> bool:
        """Follow the sampled token; True when the grammar can take no more tokens (complete)."""
        if not self._matcher.consume_token(token):
            raise GrammarError(f"structured outputs: the grammar refused token {token}: {self._matcher.get_error()}")
        return bool(self._matcher.is_stopped())


class CompiledGrammar:
    """One request's checked grammar; ``matcher()`` gives each sequence its own copy."""

    def __init__(self, constraint: StructuredOutputs, tokenizer: Any, vocab_size: int) -> None:
        what = _WHAT[constraint.kind]
        try:
            text = grammar_text(constraint)
        except ValueError as exc:  # GBNF that does not convert, a schema that is not JSON
            raise GrammarError(f"structured outputs: invalid {what}: {exc}") from None
        # The constructor drops the GIL while it compiles; errors are reported by state, not raised.
        self._template = llguidance.LLMatcher(tokenizer, text, log_level=0)
        if self._template.is_error():
            raise GrammarError(f"structured outputs: invalid {what}: {self._template.get_error().strip()}")
        self._vocab_size = vocab_size

    def matcher(self) -> TokenMatcher:
        return TokenMatcher(self._template.deep_copy(), self._vocab_size)
