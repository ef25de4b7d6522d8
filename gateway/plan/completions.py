"""Legacy completion requests: prompts and the options this backend contract cannot serve. Pure.

The vLLM-backend contract takes text, so token-id prompts and ``suffix`` (fill-in-the-middle) are
answered with a clear 400 rather than approximated.
"""

from __future__ import annotations

from gateway.errors import InvalidRequestError
from gateway.plan.requests import CompletionRequest


def completion_prompts(request: CompletionRequest) -> list[str]:
    """The text prompts. An empty one is refused as vLLM refuses it: there is nothing to continue."""
    prompt = request.prompt
    if isinstance(prompt, str):
        prompt = [prompt]
    if not prompt or any(p == "" for p in prompt):
        raise InvalidRequestError("'prompt' must not be empty", param="prompt")
    if all(isinstance(p, str) for p in prompt):
        return [str(p) for p in prompt]
    raise InvalidRequestError(
        "token-id prompts are not supported: the backend contract takes text prompts", param="prompt"
    )


def check_completion_options(request: CompletionRequest) -> None:
    if request.suffix:
        raise InvalidRequestError("'suffix' (fill-in-the-middle) is not supported by this backend", param="suffix")
    if request.best_of is not None and request.best_of != request.n:
        raise InvalidRequestError("'best_of' other than 'n' is not supported", param="best_of")
    if request.echo and request.logprobs is not None:
        raise InvalidRequestError("'echo' with 'logprobs' (prompt logprobs) is not supported", param="echo")
