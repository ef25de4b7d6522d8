"""OpenAI/vLLM request fields → vLLM ``SamplingParams`` JSON, the backend contract. Pure.

Only fields the client set are sent, so the backend's own defaults apply otherwise, with one
exception: ``max_tokens`` is always sent (vLLM's default of 16 would silently truncate). Values are
real JSON types: the vLLM backend coerces strings with ``bool("false") == True``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from gateway.backend.types import GenerationRequest, Placement, TokenPrompt
from gateway.models.catalog import ServedModel
from gateway.models.resolve import ResolvedModel
from gateway.models.tokens import TokenCounter
from gateway.plan.requests import ChatCompletionRequest, CompletionRequest, SamplingFields

# request field → SamplingParams field, copied when set (not None).
_PASS_THROUGH = (
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "top_k",
    "min_p",
    "repetition_penalty",
    "min_tokens",
    "ignore_eos",
    "stop_token_ids",
    "skip_special_tokens",
    "allowed_token_ids",
    "spaces_between_special_tokens",
)
_PASS_THROUGH_FIELDS = frozenset(_PASS_THROUGH)


def stop_list(stop: str | list[str] | None) -> list[str]:
    """The non-empty stop strings: an empty one would match at once, and vLLM refuses it."""
    if not stop:
        return []
    return [stop] if isinstance(stop, str) else [s for s in stop if s]


def to_sampling_params(
    request: SamplingFields,
    *,
    max_tokens: int,
    adapter: str | None,
    logprobs: int | None = None,
    tool_schema: Mapping[str, Any] | None = None,
    keep_special_tokens: bool = False,
) -> dict[str, Any]:
    """``tool_schema``: the JSON schema a forced ``tool_choice`` imposes (``plan/tools.py``);
    ``keep_special_tokens``: the model's tool-call markers are special tokens the parser must see
    (the client's own ``skip_special_tokens`` still wins)."""
    # One sequence per backend request: ``n`` > 1 is sent as n requests (``to_generation_requests``).
    params: dict[str, Any] = {"max_tokens": max_tokens, "n": 1}
    if not _PASS_THROUGH_FIELDS.isdisjoint(request.model_fields_set):  # a field not sent is None
        for name in _PASS_THROUGH:
            value = getattr(request, name)
            if value is not None:
                params[name] = value
    stops = stop_list(request.stop)
    if stops:
        params["stop"] = stops
    if request.include_stop_str_in_output:
        params["include_stop_str_in_output"] = True
    if request.bad_words:
        params["bad_words"] = request.bad_words
    if request.vllm_xargs:
        params["extra_args"] = request.vllm_xargs  # vLLM's server hands them on under this name
    if request.logit_bias:
        params["logit_bias"] = {str(int(k)): float(v) for k, v in request.logit_bias.items()}
    if logprobs is not None:
        params["logprobs"] = logprobs
    if adapter is not None:
        params["lora_name"] = adapter
    structured = structured_outputs(request)
    if structured is not None:
        params["structured_outputs"] = structured
    if tool_schema is not None:  # a forced call: its schema, not the text turns' format
        params["structured_outputs"] = json.dumps({"json": tool_schema})
    if keep_special_tokens and request.skip_special_tokens is None:
        params["skip_special_tokens"] = False
    return params


def structured_outputs(request: SamplingFields) -> str | None:
    """vLLM's ``structured_outputs`` extra as given, or chat's ``response_format`` turned into it, as
    the backend's ``structured_outputs`` (a JSON *string*); None when neither asks for anything.
    (``plan/validate.py`` refuses both at once.)"""
    if request.structured_outputs is not None:
        given = request.structured_outputs.model_dump(by_alias=True, exclude_none=True)
        if given.get("json_object") is False:
            del given["json_object"]  # vLLM counts a false json_object as a constraint
        return json.dumps(given)
    fmt = request.response_format if isinstance(request, (ChatCompletionRequest, CompletionRequest)) else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return json.dumps({"json_object": True})
    schema = (fmt.json_schema or {}).get("schema", {})
    return json.dumps({"json": schema})


def choice_sampling(params: Mapping[str, Any], index: int) -> Mapping[str, Any]:
    """The parameters of choice ``index`` of ``n``, derived as vLLM derives its own child requests'
    for ``n`` > 1 (``ParentRequest``): the seed becomes ``seed + index``, so each choice equals
    vLLM's choice at the same index; unseeded choices share the parameters, each drawn on its own."""
    seed = params.get("seed")
    if seed is None or index == 0:
        return params
    return {**params, "seed": seed + index}


def to_generation_requests(
    request: SamplingFields,
    resolved: ResolvedModel,
    *,
    request_ids: Sequence[str],
    prompt: str,
    max_tokens: int,
    logprobs: int | None,
    deadline: float | None,
    session_key: str | None = None,
    tool_schema: Mapping[str, Any] | None = None,
    keep_special_tokens: bool = False,
    stream_tokens: bool = False,
    images: tuple[str, ...] = (),
    tokens: TokenPrompt | None = None,
) -> list[GenerationRequest]:
    """The backend requests for one prompt: one single-sequence request per choice (``request_ids``
    holds one id per choice, ``n`` in all). ``stream_tokens``: ask the backend for a response per
    token even when the client waits for the whole answer (counting reasoning tokens needs them).

    Why not one request with ``n``: Triton's vLLM backend pairs its outputs by position and, when
    not streaming, sends only the last one, so choices land at the wrong index or are lost; and a
    TensorRT-LLM model generates one sequence per request anyway. n requests give every backend
    the same choices vLLM's own server gives. ``tokens``: the prompt as ids, for a model that
    takes them (``token_prompt``)."""
    params = to_sampling_params(
        request,
        max_tokens=max_tokens,
        adapter=resolved.adapter,
        logprobs=logprobs,
        tool_schema=tool_schema,
        keep_special_tokens=keep_special_tokens,
    )
    model = resolved.model
    return [
        GenerationRequest(
            request_id=request_id,
            model=model.route.step if model.route is not None else model.name,
            prompt=prompt,
            sampling=choice_sampling(params, index),
            stream=request.stream or stream_tokens,
            return_logprobs=logprobs is not None,
            deadline=deadline,
            inputs=model.inputs,
            contract=model.runs_contract,
            tokens=tokens,
            images=images,
            session_key=session_key,
            placement=Placement(),
        )
        for index, request_id in enumerate(request_ids)
    ]


def token_prompt(model: ServedModel, prompt: str, stops: Sequence[str], bad_words: Sequence[str]) -> TokenPrompt:
    """The prompt as the model's ``tensorrt_llm`` step takes it: tokenized as its preprocessing
    step would (``add_special_tokens``), stop and bad words each alone without special tokens."""
    route, tokenizer = model.route, model.tokenizer
    assert route is not None and tokenizer is not None  # a route is only made with a tokenizer

    def alone(words: Sequence[str]) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(tokenizer.encode(w, add_special_tokens=False).ids) for w in words if w)

    # encode_batch_fast releases the GIL (encode does not), so a long prompt on the pool does not
    # hold up the event loop; it skips offsets, which nothing here reads.
    ids = tokenizer.encode_batch_fast([prompt], add_special_tokens=route.add_special_tokens)[0].ids
    return TokenPrompt(tuple(ids), route.end_id, route.pad_id, stop_words=alone(stops), bad_words=alone(bad_words))


async def tokens_for(
    model: ServedModel, prompt: str, request: SamplingFields, counter: TokenCounter
) -> TokenPrompt | None:
    """``token_prompt`` for a model with a token route (off the event loop for a long prompt,
    as counting is); None for every other model."""
    if model.route is None:
        return None
    make = partial(token_prompt, model, stops=stop_list(request.stop), bad_words=request.bad_words or ())
    return await counter.run(make, prompt, len(prompt))
