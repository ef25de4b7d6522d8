"""Planning: a validated OpenAI request → a ``GenerationPlan``, every decision made before Triton.

``prepare_chat`` and ``prepare_completion`` are the whole order of a request, top to bottom, each
stage one call into the module that owns it, none calling back into an earlier one:

1. check the body alone (``limits``: the gateway's own caps on ``n``, messages, options; chat's
   deprecated ``functions`` read as ``tools``; ``extras``: vLLM's extras that cannot be honoured);
2. resolve the model and adapter (``models.resolve``, on the catalog's snapshot);
3. check the body against the model (``validate``: what vLLM would refuse), then load and check
   its images (``images``: data URLs, allowed fetches; chat only);
4. tools (``tools``: what ``tools``/``tool_choice`` do to the prompt, the sampling, the reading);
5. render the prompt(s) (``chat``: the chat template; ``completions``: the prompt list);
6. budget each prompt (``budget``: prompt limits, token count when it matters, ``max_tokens``);
7. sampling parameters, one backend request per choice (``sampling``);
8. the plan: ids, usage options, echo, the scheduler's claim and the band Triton hears (here).

Pure apart from reading the catalog's snapshot and counting long prompts on its threads. The
core runs a plan; the HTTP edge encodes its result.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from gateway.backend.types import GenerationRequest
from gateway.config import Settings
from gateway.core.generation_plan import Detokenizing, GenerationPlan, ReasoningPlan, ToolPlan
from gateway.images.fetch import ImageFetcher
from gateway.models.catalog import ModelCatalog, ServedModel
from gateway.models.resolve import ResolvedModel, resolve_model
from gateway.plan.budget import plan_budget
from gateway.plan.chat import chat_echo, chat_max_tokens, render_chat_prompt
from gateway.plan.completions import check_completion_options, completion_prompts
from gateway.plan.extras import check_extras
from gateway.plan.images import image_parts, load_images
from gateway.plan.limits import check_chat_limits, check_sampling_limits
from gateway.plan.priority import estimate_tokens, plan_claim, triton_priority
from gateway.plan.reasoning import needs_special_tokens, plan_reasoning
from gateway.plan.requests import ChatCompletionRequest, CompletionRequest, OtherContentPart, SamplingFields
from gateway.plan.sampling import stop_list, structured_outputs, to_generation_requests, tokens_for
from gateway.plan.tools import NO_TOOLS, ToolsDecision, from_legacy_functions, plan_tools
from gateway.plan.validate import check_request
from gateway.tools.registry import PARSERS
from gateway.tracing import PREPARE, current_trace


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What the HTTP edge knows about a request that planning needs."""

    request_id: str
    deadline: float | None = None
    """``time.monotonic()`` by which the whole request must be done; None for no deadline."""
    session_key: str | None = None
    """The ``X-Session-Id`` header: the first of the keys that route a conversation to one
    Triton replica (``session_key_of``)."""
    max_tokens_up_to_context: bool = False
    """A ``max_tokens`` over the room the prompt leaves is lowered to it, not refused (the
    Messages API: ``budget.resolve_max_tokens``)."""
    priority: int | None = None
    """The ``x-gateway-priority`` header's band, for clients that cannot add a body field; the
    body's ``priority`` wins (``plan/priority.py``)."""


class SessionFields(Protocol):
    """The body fields that name a conversation (chat, completions and Responses all have them)."""

    prompt_cache_key: str | None
    user: str | None


def session_key_of(context: RequestContext, body: SessionFields) -> str | None:
    """What ties the request to a conversation, most explicit first: the header, OpenAI's
    ``prompt_cache_key``, then ``user`` (the Responses route adds its conversation's root)."""
    return context.session_key or body.prompt_cache_key or body.user or None


def choice_ids(request_id: str, first: int, n: int, total: int) -> list[str]:
    """Triton request ids for ``n`` choices from index ``first``: the request's own id when it
    has one choice, else ``<id>-<choice index>``, so Triton's logs tell the choices apart."""
    if total == 1:
        return [request_id]
    return [f"{request_id}-{index}" for index in range(first, first + n)]


def _plan(
    body: SamplingFields,
    context: RequestContext,
    resolved: ResolvedModel,
    requests: list[GenerationRequest],
    max_tokens: list[int],
    *,
    logprobs: int | None,
    prompt_tokens: tuple[int | None, ...],
    echo: tuple[str, ...] | None = None,
    tools: ToolPlan | None = None,
    reasoning: ReasoningPlan | None = None,
) -> GenerationPlan:
    options = body.stream_options
    chat = isinstance(body, ChatCompletionRequest)
    claim = plan_claim(
        body.priority, context.priority, _prompt_cost(requests, prompt_tokens, body.n), sum(max_tokens) * body.n
    )
    level = triton_priority(claim.band, resolved.model.priority_levels)
    if level:  # the band that runs, known once the claim is: Triton's queue orders by it too
        requests = [replace(request, priority=level) for request in requests]
    return GenerationPlan(
        requests=tuple(requests),
        request_id=context.request_id,
        chat=chat,
        stream=body.stream,
        model_id=body.model,
        adapter=resolved.adapter,
        completion_id=f"{'chatcmpl' if chat else 'cmpl'}-{os.urandom(16).hex()}",  # as request_id's
        created=int(time.time()),
        n=body.n,
        stops=tuple(stop_list(body.stop)),
        include_stop=body.include_stop_str_in_output,
        max_tokens=tuple(max_tokens),
        include_usage=bool(options and options.include_usage),
        continuous_usage=bool(options and options.continuous_usage_stats),
        logprobs=logprobs,
        token_ids=bool(body.return_tokens_as_token_ids),
        echo=echo,
        prompt_tokens=prompt_tokens,
        deadline=context.deadline,
        tools=tools,
        reasoning=reasoning,
        served_model=resolved.model.name,
        detokenize=detokenizing(resolved.model, requests[0]),
        count_completion=completion_counting(resolved.model),
        claim=claim,
    )


def _prompt_cost(requests: list[GenerationRequest], counts: tuple[int | None, ...], n: int) -> int:
    """The prompt tokens of every choice: counted where planning counted them, else the token
    ids sent, else an estimate from the text (the scheduler settles the cost when it ends)."""
    total = 0
    for index, request in enumerate(requests):
        count = counts[index // n] if index // n < len(counts) else None
        if count is None:
            count = len(request.tokens.ids) if request.tokens is not None else estimate_tokens(request.prompt)
        total += count
    return total


def detokenizing(model: ServedModel, request: GenerationRequest) -> Detokenizing | None:
    """How a model that answers token ids has them read: with its tokenizer, special tokens
    skipped as its postprocessing step would, unless the request keeps them (tool markers)."""
    if model.route is None:
        return None
    skip = request.sampling.get("skip_special_tokens")
    return Detokenizing(model.tokenizer, model.route.skip_special_tokens if skip is None else bool(skip))


def completion_counting(model: ServedModel) -> Callable[[str], int] | None:
    """For a TensorRT-LLM model that answers text: its tokenizer counts a choice's text where
    the answers carry no token counts (the LLM-API model; ensembles before 2025-06; a BLS before
    2025-10 declares the counts but does not pass them on)."""
    if not model.trtllm or model.route is not None or model.tokenizer is None:
        return None
    tokenizer = model.tokenizer
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    """A chat request through its first five stages: what counting and generating share."""

    body: ChatCompletionRequest
    """The request as planned (deprecated ``functions`` read as ``tools``)."""
    resolved: ResolvedModel
    tools: ToolsDecision
    prompt: str
    """The rendered prompt: the text the backend tokenizes."""
    images: list[tuple[str, OtherContentPart]]
    """Its image parts (where each is, the part), checked against the model but not yet read."""


async def render_chat(body: ChatCompletionRequest, catalog: ModelCatalog, settings: Settings) -> ChatPrompt:
    """Stages 1-5 of a chat request: checked, its model resolved, tools decided, the prompt
    rendered. ``prepare_chat`` goes on from here, and ``plan.count`` counts the prompt, so a count
    is made of exactly the text a generation would send."""
    body = from_legacy_functions(body)  # 1
    check_chat_limits(body, max_n=settings.max_n, max_messages=settings.max_messages)
    check_extras(body)
    resolved = resolve_model(body.model, await catalog.models(), settings.lora_separator)  # 2
    check_request(body, resolved.model, settings)  # 3
    images = image_parts(body, resolved.model, settings)  # images only where the model takes them
    tools: ToolsDecision = plan_tools(body, resolved.model) if body.tools else NO_TOOLS  # 4
    prompt = render_chat_prompt(  # 5
        body, resolved, tools.template_tools, allow_request_template=settings.allow_request_chat_template
    )
    return ChatPrompt(body, resolved, tools, prompt, images)


async def prepare_chat(
    body: ChatCompletionRequest,
    context: RequestContext,
    catalog: ModelCatalog,
    settings: Settings,
    images: ImageFetcher | None = None,
) -> GenerationPlan:
    """``images``: what fetches ``http(s)`` image URLs (None: only ``data:`` URLs are taken)."""
    trace, started = current_trace.get(), time.perf_counter()
    rendered = await render_chat(body, catalog, settings)  # 1-5
    body, resolved, tools, prompt = rendered.body, rendered.resolved, rendered.tools, rendered.prompt
    loaded = await load_images(rendered.images, settings, images)  # each image read and checked
    max_tokens, prompt_tokens = await plan_budget(  # 6
        chat_max_tokens(body),
        resolved.model,
        prompt,
        settings,
        catalog.counter,
        min_tokens=body.min_tokens,
        param="messages",
        up_to_context=context.max_tokens_up_to_context,
    )
    constrained = tools.structured is not None or structured_outputs(body) is not None
    reasoning = plan_reasoning(
        body, resolved.model, prompt=prompt, constrained=constrained, calls=tools.plan is not None
    )
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    requests = to_generation_requests(  # 7
        body,
        resolved,
        request_ids=choice_ids(context.request_id, 0, body.n, body.n),
        prompt=prompt,
        max_tokens=max_tokens,
        logprobs=logprobs,
        deadline=context.deadline,
        session_key=session_key_of(context, body),
        tool_schema=tools.structured,
        keep_special_tokens=(tools.plan is not None and PARSERS[tools.plan.parser].needs_special_tokens)
        or needs_special_tokens(reasoning),
        stream_tokens=reasoning is not None,
        images=loaded,
        tokens=await tokens_for(resolved.model, prompt, body, catalog.counter),
    )
    if trace is not None:
        trace.phase(PREPARE, started)
    return _plan(  # 8
        body,
        context,
        resolved,
        requests,
        [max_tokens],
        logprobs=logprobs,
        prompt_tokens=(prompt_tokens,),
        echo=chat_echo(body),
        tools=tools.plan,
        reasoning=reasoning,
    )


async def prepare_completion(
    body: CompletionRequest, context: RequestContext, catalog: ModelCatalog, settings: Settings
) -> GenerationPlan:
    trace, started = current_trace.get(), time.perf_counter()
    check_sampling_limits(body, max_n=settings.max_n)  # 1
    check_completion_options(body)
    check_extras(body)
    prompts = completion_prompts(body)  # 5 comes first: a prompt the contract cannot take is a 400 about the body
    resolved = resolve_model(body.model, await catalog.models(), settings.lora_separator)  # 2
    check_request(body, resolved.model, settings)  # 3; no tools (4) on legacy completions
    requested = body.max_tokens
    if requested is None and settings.completions_default_max_tokens:  # the legacy default, within the cap
        cap = settings.limits_for(resolved.model.name)[2]
        requested = min(settings.completions_default_max_tokens, cap or settings.completions_default_max_tokens)
    requests, budgets, counts = [], [], []
    for position, prompt in enumerate(prompts):
        max_tokens, prompt_tokens = await plan_budget(  # 6
            requested, resolved.model, prompt, settings, catalog.counter, min_tokens=body.min_tokens
        )
        budgets.append(max_tokens)
        counts.append(prompt_tokens)
        requests.extend(
            to_generation_requests(  # 7
                body,
                resolved,
                request_ids=choice_ids(context.request_id, position * body.n, body.n, len(prompts) * body.n),
                prompt=prompt,
                max_tokens=max_tokens,
                logprobs=body.logprobs,
                deadline=context.deadline,
                session_key=session_key_of(context, body),
                tokens=await tokens_for(resolved.model, prompt, body, catalog.counter),
            )
        )
    if trace is not None:
        trace.phase(PREPARE, started)
    return _plan(  # 8
        body,
        context,
        resolved,
        requests,
        budgets,
        logprobs=body.logprobs,
        prompt_tokens=tuple(counts),
        echo=tuple(prompts) if body.echo else None,
    )
