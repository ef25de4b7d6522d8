"""The token budget of one prompt: how many tokens to ask for, and how many the prompt has.

The gateway counts prompt tokens itself when the model's tokenizer is at hand, so a prompt that
cannot fit the context is a 400 before Triton sees it, and a request without ``max_tokens`` asks
for exactly the room left (rather than a fixed default that may overflow or truncate).

Counting costs about 1 µs per byte, so ``plan_budget`` counts only when the answer can change the
request (``count_needed``, with ``models/token_bound.py``) and then off the event loop
(``models/tokens.py``); the refusals and the numbers sent are the same as counting every prompt
in place.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from gateway.config import Settings
from gateway.errors import ContextLengthExceededError, InvalidRequestError
from gateway.models.catalog import ServedModel
from gateway.models.tokens import TokenCounter, count_tokens


def count_prompt_tokens(model: ServedModel, prompt: str) -> int | None:
    """The prompt's token count, or None when the model's files have no tokenizer."""
    if model.tokenizer is None:
        return None
    return count_tokens(model.tokenizer, prompt)


def counting_for(model: ServedModel) -> Callable[[str], int]:
    """How planning counts the model's prompts: through its stretch cache when it has one. Same
    numbers as ``count_tokens``; the caller checks that the model has a tokenizer."""
    if model.prompt_tokenizer is not None:
        return model.prompt_tokenizer.count
    return partial(count_tokens, model.tokenizer)


def count_needed(requested: int | None, model: ServedModel, prompt: str) -> bool:
    """Whether the prompt's count can change what is sent or refused.

    It cannot when the model's tokenizer has a length bound (so the prompt counts at least one
    token and at most ``bound``), the backend reports the prompt's tokens for usage (the vLLM
    contract's ``num_input_tokens``; some TensorRT-LLM layouts report none), and either the context
    is unknown (nothing to check) or ``max_tokens`` is given and fits beside the bound.
    """
    if model.tokenizer is None:
        return False
    bound = model.prompt_tokenizer.bound if model.prompt_tokenizer is not None else None
    if bound is None or not prompt or not model.reports_prompt_tokens:
        return True
    if model.max_model_len is None:
        return False
    if requested is None:
        return True  # the default max_tokens is the room the prompt leaves
    return bound.at_most(prompt) + max(requested, 1) > model.max_model_len


def check_prompt_limits(
    prompt: str, requested: int | None, *, max_prompt_chars: int, max_tokens_cap: int | None
) -> None:
    if len(prompt) > max_prompt_chars:
        raise InvalidRequestError(
            f"The prompt is {len(prompt)} characters; the limit is {max_prompt_chars}.", code="prompt_too_long"
        )
    if max_tokens_cap is not None and requested is not None and requested > max_tokens_cap:
        raise InvalidRequestError(
            f"max_tokens is {requested}; this gateway allows at most {max_tokens_cap}.", param="max_tokens"
        )


def resolve_max_tokens(
    requested: int | None,
    *,
    prompt_tokens: int | None,
    max_model_len: int | None,
    fallback: int,
    up_to_context: bool = False,
) -> int:
    """How many tokens to ask for: what was requested, else all the room the context leaves.

    Raises ``ContextLengthExceededError`` when the prompt, or the prompt plus the request, does not
    fit, with OpenAI's wording so clients that parse it keep working. ``up_to_context`` (the
    Messages API, whose clients send one ``max_tokens`` for every model): a request larger than
    the room left is lowered to it, and only a prompt that fills the context is refused
    (``plan_budget`` lowers it to the gateway's ``max_tokens_limit`` first).
    """
    if max_model_len is None or prompt_tokens is None:
        return requested if requested is not None else fallback
    room = max_model_len - prompt_tokens
    if up_to_context and requested is not None and room > 0:
        return min(requested, room)
    if room <= 0 or (requested is not None and requested > room):
        asked = requested if requested is not None else 1
        raise ContextLengthExceededError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + asked} tokens ({prompt_tokens} in the messages, {asked} in the completion). "
            "Please reduce the length of the messages or completion.",
            param="messages",
        )
    return requested if requested is not None else room


async def plan_budget(
    requested: int | None,
    model: ServedModel,
    prompt: str,
    settings: Settings,
    counter: TokenCounter,
    *,
    min_tokens: int | None = None,
    param: str = "prompt",
    up_to_context: bool = False,
) -> tuple[int, int | None]:
    """``token_budget`` with the prompt counted only when needed, and off the event loop when long.
    A prompt over the gateway's limits is refused before any counting."""
    cap = settings.limits_for(model.name)[2]
    if up_to_context and cap is not None and requested is not None:
        requested = min(requested, cap)  # lowered to the gateway's cap too, as to the context
    check_prompt_limits(prompt, requested, max_prompt_chars=settings.max_prompt_chars, max_tokens_cap=cap)
    counted = await counter.count(counting_for(model), prompt) if count_needed(requested, model, prompt) else None
    return _budget(
        requested,
        model,
        settings,
        cap=cap,
        min_tokens=min_tokens,
        param=param,
        prompt_tokens=counted,
        up_to_context=up_to_context,
    )


def token_budget(
    requested: int | None,
    model: ServedModel,
    prompt: str,
    settings: Settings,
    *,
    min_tokens: int | None = None,
    param: str = "prompt",
) -> tuple[int, int | None]:
    """``max_tokens`` to send (never over the model's configured cap), and the prompt's count,
    always counted in place: what ``plan_budget`` must agree with (its property test).

    Refuses, as vLLM would, a prompt of no tokens (``param`` names where it came from) and a
    ``min_tokens`` over the ``max_tokens`` sent: the default ``max_tokens`` counts too, since
    the backend compares with what it receives.
    """
    cap = settings.limits_for(model.name)[2]
    check_prompt_limits(prompt, requested, max_prompt_chars=settings.max_prompt_chars, max_tokens_cap=cap)
    counted = count_prompt_tokens(model, prompt)
    return _budget(requested, model, settings, cap=cap, min_tokens=min_tokens, param=param, prompt_tokens=counted)


def _budget(
    requested: int | None,
    model: ServedModel,
    settings: Settings,
    *,
    cap: int | None,
    min_tokens: int | None,
    param: str,
    prompt_tokens: int | None,
    up_to_context: bool = False,
) -> tuple[int, int | None]:
    """``cap``: the model's ``max_tokens_limit`` (``Settings.limits_for``), read once by the caller."""
    if prompt_tokens == 0:
        raise InvalidRequestError("The decoder prompt cannot be empty", param=param)
    max_tokens = resolve_max_tokens(
        requested,
        prompt_tokens=prompt_tokens,
        max_model_len=model.max_model_len,
        fallback=settings.default_max_tokens,
        up_to_context=up_to_context,
    )
    if cap is not None:
        max_tokens = min(max_tokens, cap)
    if min_tokens is not None and min_tokens > max_tokens:
        raise InvalidRequestError(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.", param="min_tokens"
        )
    return max_tokens, prompt_tokens
