"""Next-token selection: vLLM's logits pipeline on one sequence's logits, plus logprob entries.

Order (as vLLM's v1 sampler): logit_bias, min_tokens masking, penalties, then temperature, min_p,
top_k, top_p and the draw. Greedy (temperature ~ 0) takes the argmax after bias and penalties.
Logprobs are vLLM's default "raw" logprobs: the log-softmax of the model's logits before any of
the above. The draw uses the sequence's own ``torch.Generator``, so a seeded sequence does not
depend on anything else running in the process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from sampling_params import SamplingParams


def apply_logit_bias(logits: torch.Tensor, bias: dict[int, float]) -> None:
    """Add the OpenAI-style per-token bias in place."""
    if bias:
        ids = torch.tensor(list(bias), dtype=torch.long)
        logits[ids] += torch.tensor(list(bias.values()), dtype=logits.dtype)


def ban_tokens(logits: torch.Tensor, token_ids: Iterable[int]) -> None:
    """Make tokens impossible (used to hold back EOS and stop tokens until min_tokens)."""
    ids = list(token_ids)
    if ids:
        logits[torch.tensor(ids, dtype=torch.long)] = -float("inf")


def apply_penalties(
    logits: torch.Tensor, output_counts: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
) -> None:
    """vLLM's penalties in place: repetition over prompt+output tokens, presence/frequency over output."""
    if params.repetition_penalty != 1.0:
        seen = prompt_mask | (output_counts > 0)
        penalized = torch.where(logits > 0, logits / params.repetition_penalty, logits * params.repetition_penalty)
        logits.copy_(torch.where(seen, penalized, logits))
    if params.frequency_penalty:
        logits -= params.frequency_penalty * output_counts
    if params.presence_penalty:
        logits -= params.presence_penalty * (output_counts > 0).to(logits.dtype)


def _filter_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    probs = torch.softmax(logits, dim=-1)
    return logits.masked_fill(probs < min_p * probs.max(), -float("inf"))


def _filter_top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    if top_k <= 0 or top_k >= logits.numel():
        return logits
    kth_value = torch.topk(logits, top_k).values[-1]
    return logits.masked_fill(logits < kth_value, -float("inf"))


def _filter_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    # Drop a token when the tokens ranked before it already cover top_p; the first always stays.
    drop_sorted = (torch.cumsum(probs, dim=-1) - probs) > top_p
    drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
    return logits.masked_fill(drop, -float("inf"))


def choose_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """Pick the next token from processed logits (greedy or a seeded draw)."""
    if params.greedy:
        return int(torch.argmax(logits))
    scaled = logits / params.temperature
    if params.min_p > 0:
        scaled = _filter_min_p(scaled, params.min_p)
    scaled = _filter_top_p(_filter_top_k(scaled, params.top_k), params.top_p)
    probs = torch.softmax(scaled, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def logprob_entry(
    raw_logprobs: torch.Tensor, token_id: int, top: int, decode: Callable[[int], str]
) -> dict[str, dict[str, float | int | str]]:
    """One token's vLLM logprobs dict: the chosen token first, then the ``top`` most likely tokens.

    Keys are token ids as strings (that is what JSON makes of vLLM's int keys); ``rank`` is 1-based
    among all tokens, ties counted in the token's favour, as vLLM does.
    """
    chosen_logprob = float(raw_logprobs[token_id])
    entry: dict[str, dict[str, float | int | str]] = {
        str(token_id): {
            "logprob": chosen_logprob,
            "rank": int((raw_logprobs > raw_logprobs[token_id]).sum()) + 1,
            "decoded_token": decode(token_id),
        }
    }
    if top > 0:
        values, ids = torch.topk(raw_logprobs, top)
        for rank, (value, top_id) in enumerate(zip(values.tolist(), ids.tolist(), strict=True), start=1):
            entry.setdefault(str(top_id), {"logprob": value, "rank": rank, "decoded_token": decode(top_id)})
    return entry
