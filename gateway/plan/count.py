"""Counting a request's prompt tokens without generating: the number its ``usage`` would report.

A count is only worth having if it is the number the generation bills, so nothing here renders or
counts on its own: ``count_chat_prompt`` runs a chat request through the chat path's own first
stages (``prepare.render_chat``: the checks, the model, the tools as the template sees them, the
template) and counts the prompt as planning counts it (``budget.counting_for``: the model's
tokenizer, special tokens added as the backend adds them to a text prompt, off the event loop when
long). ``count_prompt`` does the same for a completions prompt, which is sent as it is.

A prompt longer than the model's context is still counted (vLLM's ``/tokenize`` counts it too):
the count is how a client finds out by how much. The gateway's own limit on prompt characters
still holds, since counting costs CPU in proportion to the text.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config import Settings
from gateway.errors import InvalidRequestError, ModelNotFoundError
from gateway.models.catalog import ModelCatalog, ServedModel
from gateway.models.resolve import resolve_model, visible_models
from gateway.plan.budget import check_prompt_limits, counting_for
from gateway.plan.prepare import render_chat
from gateway.plan.requests import ChatCompletionRequest


async def count_chat_prompt(body: ChatCompletionRequest, catalog: ModelCatalog, settings: Settings) -> int:
    """The prompt tokens of a chat request: its ``usage.prompt_tokens``, counted without
    generating. Raises what the chat request itself would be refused with (a 404 for an unknown
    model, a 400 naming the field), and a 400 when the model has no tokenizer to count with."""
    rendered = await render_chat(body, catalog, settings)
    return await count_text(rendered.resolved.model, rendered.prompt, catalog, settings)


async def count_prompt(model: str, prompt: str, catalog: ModelCatalog, settings: Settings) -> int:
    """The prompt tokens of a completions prompt for ``model`` (a served id, adapters included)."""
    resolved = resolve_model(model, await catalog.models(), settings.lora_separator)
    return await count_text(resolved.model, prompt, catalog, settings)


async def count_text(model: ServedModel, prompt: str, catalog: ModelCatalog, settings: Settings) -> int:
    """A prompt already rendered, counted as planning counts it."""
    check_countable(model, prompt, settings)
    return await catalog.counter.count(counting_for(model), prompt)


def check_countable(model: ServedModel, prompt: str, settings: Settings) -> None:
    """A model without a tokenizer cannot be counted here (the backend counts for its usage); a
    prompt over ``max_prompt_chars`` is refused as a generation would refuse it."""
    if model.tokenizer is None:
        raise InvalidRequestError(
            f"The model '{model.name}' has no tokenizer the gateway can read, so its tokens cannot be counted; "
            "configure the model's tokenizer directory (GATEWAY_MODEL_FILES).",
            param="model",
        )
    check_prompt_limits(prompt, None, max_prompt_chars=settings.max_prompt_chars, max_tokens_cap=None)


def default_model(model_id: str | None, models: Mapping[str, ServedModel]) -> str:
    """``model`` may be left out when the gateway serves one model (vLLM serves one): one the
    request's key may use, and the error names only those, so a key learns no other model."""
    if model_id is not None:
        return model_id
    models = visible_models(models)
    if len(models) == 1:
        return next(iter(models))
    if not models:
        raise ModelNotFoundError("No model is being served.", param="model")
    raise InvalidRequestError(
        f"'model' is required: this gateway serves {len(models)} models ({', '.join(sorted(models))}).",
        param="model",
    )
