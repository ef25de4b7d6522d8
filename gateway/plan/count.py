"""Counting a chat request's prompt tokens without generating: the number its ``usage`` reports.

The prompt is rendered by the chat path's own stages (the checks, the model, the tools as the
template sees them, the template) and counted as planning counts it (``budget``: the model's
tokenizer, off the event loop).
"""

from __future__ import annotations

from gateway.config import Settings
from gateway.errors import InvalidRequestError
from gateway.models.catalog import ModelCatalog
from gateway.models.resolve import resolve_model
from gateway.plan.budget import _counting, check_prompt_limits
from gateway.plan.chat import render_chat_prompt
from gateway.plan.limits import check_chat_limits
from gateway.plan.requests import ChatCompletionRequest
from gateway.plan.tools import NO_TOOLS, from_legacy_functions, plan_tools
from gateway.plan.validate import check_request


async def count_chat_prompt(body: ChatCompletionRequest, catalog: ModelCatalog, settings: Settings) -> int:
    """The prompt tokens of a chat request, counted without generating. Raises what the chat
    request itself would be refused with, and a 400 when the model has no tokenizer."""
    body = from_legacy_functions(body)
    check_chat_limits(body, max_n=settings.max_n, max_messages=settings.max_messages)
    resolved = resolve_model(body.model, await catalog.models(), settings.lora_separator)
    check_request(body, resolved.model, settings)
    tools = plan_tools(body, resolved.model) if body.tools else NO_TOOLS
    prompt = render_chat_prompt(
        body, resolved, tools.template_tools, allow_request_template=settings.allow_request_chat_template
    )
    model = resolved.model
    if model.tokenizer is None:
        raise InvalidRequestError(
            f"The model '{model.name}' has no tokenizer the gateway can read, so its tokens cannot be counted.",
            param="model",
        )
    check_prompt_limits(prompt, None, max_prompt_chars=settings.max_prompt_chars, max_tokens_cap=None)
    return await catalog.counter.count(_counting(model), prompt)
