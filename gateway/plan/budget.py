"""The token budget of one prompt: how many tokens to ask for, and how many the prompt has. Pure.

The gateway counts prompt tokens itself when the model's tokenizer is at hand, so a prompt that
cannot fit the context is a 400 before Triton sees it, and a request without ``max_tokens`` asks
for exactly the room left (rather than a fixed default that may overflow or truncate).
"""

from __future__ import annotations

from gateway.config import Settings
from gateway.errors import InvalidRequestError
from gateway.models.catalog import ServedModel
from gateway.plan.limits import check_prompt_limits
from gateway.plan.sampling import resolve_max_tokens


def count_prompt_tokens(model: ServedModel, prompt: str) -> int | None:
    """The prompt's token count, or None when the model's files have no tokenizer."""
    if model.tokenizer is None:
        return None
    return len(model.tokenizer.encode(prompt).ids)


def token_budget(
    requested: int | None,
    model: ServedModel,
    prompt: str,
    settings: Settings,
    *,
    min_tokens: int | None = None,
    param: str = "prompt",
) -> tuple[int, int | None]:
    """``max_tokens`` to send (never over the model's configured cap), and the prompt's count.

    Refuses, as vLLM would, a prompt of no tokens (``param`` names where it came from) and a
    ``min_tokens`` over the ``max_tokens`` sent: the default ``max_tokens`` counts too, since
    the backend compares with what it receives.
    """
    cap = settings.limits_for(model.name)[2]
    check_prompt_limits(prompt, requested, max_prompt_chars=settings.max_prompt_chars, max_tokens_cap=cap)
    prompt_tokens = count_prompt_tokens(model, prompt)
    if prompt_tokens == 0:
        raise InvalidRequestError("The decoder prompt cannot be empty", param=param)
    max_tokens = resolve_max_tokens(
        requested,
        prompt_tokens=prompt_tokens,
        max_model_len=model.max_model_len,
        fallback=settings.default_max_tokens,
    )
    if cap is not None:
        max_tokens = min(max_tokens, cap)
    if min_tokens is not None and min_tokens > max_tokens:
        raise InvalidRequestError(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.", param="min_tokens"
        )
    return max_tokens, prompt_tokens
