"""Legacy completion requests → prompts and ``GenerationRequest``s. Pure.

The vLLM-backend contract takes text, so token-id prompts and ``suffix`` (fill-in-the-middle) are
answered with a clear 400 rather than approximated.
"""

from __future__ import annotations

from gateway.backend.types import GenerationRequest
from gateway.errors import InvalidRequestError
from gateway.schemas import CompletionRequest
from gateway.translate.models import ResolvedModel
from gateway.translate.sampling import to_sampling_params


def completion_prompts(request: CompletionRequest) -> list[str]:
    prompt = request.prompt
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
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


def to_completion_generation(
    request: CompletionRequest,
    resolved: ResolvedModel,
    *,
    request_id: str,
    prompt: str,
    max_tokens: int,
    deadline: float | None,
) -> GenerationRequest:
    return GenerationRequest(
        request_id=request_id,
        model=resolved.model.name,
        prompt=prompt,
        sampling=to_sampling_params(request, max_tokens=max_tokens, adapter=resolved.adapter, logprobs=request.logprobs),
        stream=request.stream,
        return_logprobs=request.logprobs is not None,
        deadline=deadline,
    )
