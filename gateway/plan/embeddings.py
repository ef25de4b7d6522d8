"""``/v1/embeddings``: the request body, and its planning into an ``EmbeddingPlan``.

Every 4xx about an embedding request is decided here, before Triton is called: the input's
shape (a string, strings, token ids, lists of token ids; nothing empty), the gateway's cap on
inputs, a model that does not embed, ``dimensions`` the model does not allow, token ids outside
the vocabulary, and ``normalize: false``, which Triton's vLLM backend cannot honour (it builds
its ``PoolingParams`` from ``dimensions`` alone, and vLLM normalizes by default).

``truncate_prompt_tokens`` (vLLM's extra) is applied here, because the backend ignores it: the
input is tokenized as vLLM would (special tokens added), its last k tokens kept, as vLLM's
left-side truncation does, and sent as token ids. Only then does the gateway tokenize at all;
otherwise the backend's ``num_input_tokens`` gives usage.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, ValidatorFunctionWrapHandler, field_validator

from gateway.backend.types import EmbeddingRequest
from gateway.config import Settings
from gateway.core.embed import EmbeddingPlan
from gateway.errors import ContextLengthExceededError, InvalidRequestError
from gateway.models.catalog import ModelCatalog, ServedModel
from gateway.models.resolve import resolve_model
from gateway.models.tokens import TokenCounter
from gateway.plan.nullable import NullMeansDefault
from gateway.plan.priority import estimate_tokens, plan_claim
from gateway.plan.requests import INT32_MAX


class EmbeddingCreateRequest(NullMeansDefault):
    """OpenAI's ``CreateEmbeddingRequest`` with vLLM's extras; unknown fields are kept and ignored."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1)
    """vLLM: keep the last k tokens of each input (-1: the model's context length)."""
    normalize: bool | None = None
    """vLLM's pooling option; only ``true`` (the default) can be honoured through Triton."""

    @field_validator("input", mode="wrap")
    @classmethod
    def _one_of_the_shapes(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """One error naming the four shapes, instead of one per member of the union."""
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(
                "input must be a string, a list of strings, a list of token ids, or a list of lists of token ids"
            ) from None


Input = str | list[int]


def embedding_inputs(body: EmbeddingCreateRequest) -> list[Input]:
    """The inputs one by one, each a text or a token-id list; 400 for anything empty."""
    raw: Any = body.input
    if isinstance(raw, str):
        inputs: list[Input] = [raw]
    elif raw and isinstance(raw[0], int):
        inputs = [list(raw)]
    else:
        inputs = list(raw)
    if not inputs:
        raise InvalidRequestError("input must not be an empty list", param="input")
    for item in inputs:
        if len(item) == 0:
            what = "string" if isinstance(item, str) else "list of token ids"
            raise InvalidRequestError(f"input must not contain an empty {what}", param="input")
    return inputs


def check_embedding_model(body: EmbeddingCreateRequest, model: ServedModel, adapter: str | None) -> None:
    """What the model can do: embed at all, ``dimensions``, ``normalize``; no LoRA adapter."""
    if not model.embeds:
        raise InvalidRequestError(
            f"The model '{model.name}' does not serve embeddings: it is not run as a pooling model "
            '(model.json\'s "runner": "pooling", or the model_files setting\'s runner).',
            param="model",
            code="model_not_embedding",
        )
    if adapter is not None:
        raise InvalidRequestError(
            f"LoRA adapters cannot embed: use the base model '{model.name}'.", param="model", code="model_not_embedding"
        )
    if body.normalize is False:
        raise InvalidRequestError(
            "normalize: false is not supported: Triton's vLLM backend passes only dimensions to the "
            "pooler, which normalizes.",
            param="normalize",
        )
    dimensions = body.dimensions
    if dimensions is None:
        return
    if dimensions < 1:
        raise InvalidRequestError("dimensions must be greater than 0", param="dimensions")
    allowed = model.matryoshka_dimensions
    if allowed is None:
        raise InvalidRequestError(
            f"The model '{model.name}' does not support matryoshka representation: dimensions cannot "
            "be set (the model_files setting's matryoshka_dimensions lists the sizes it allows).",
            param="dimensions",
        )
    if allowed and dimensions not in allowed:
        sizes = ", ".join(map(str, allowed))
        raise InvalidRequestError(
            f"The model '{model.name}' supports dimensions {sizes}; got {dimensions}.", param="dimensions"
        )


def _vocab_size(model: ServedModel) -> int | None:
    tokenizer = model.tokenizer
    return int(tokenizer.get_vocab_size(with_added_tokens=True)) if tokenizer is not None else None


MAX_TOKEN_ID = INT32_MAX
"""The largest token id any model can have: vLLM holds ids as 32-bit integers. Where the
tokenizer is not known this is the bound, so an id such as 2**64, which no JSON writer the
backend uses can write, is a 400 here and never reaches the backend."""


def check_token_ids(inputs: Sequence[Input], model: ServedModel) -> None:
    """Token ids must exist in the model's vocabulary (when its tokenizer is known), and be
    32-bit ids in any case (``MAX_TOKEN_ID``), as ``/detokenize`` bounds them.
    ``min``/``max`` first: C loops, so a large batch of ids costs the event loop little."""
    vocab = _vocab_size(model)
    end = min(vocab, MAX_TOKEN_ID + 1) if vocab is not None else MAX_TOKEN_ID + 1
    for position, item in enumerate(inputs):
        if isinstance(item, str) or (min(item) >= 0 and max(item) < end):
            continue
        bad = next(t for t in item if t < 0 or t >= end)
        where = f"input[{position}]" if len(inputs) > 1 else "input"
        raise InvalidRequestError(
            f"Token id {bad} in {where} is out of the model's vocabulary (0..{end - 1}).", param="input"
        )


def _truncation(body: EmbeddingCreateRequest, model: ServedModel) -> int | None:
    """How many tokens ``truncate_prompt_tokens`` keeps per input; None: no truncation."""
    k = body.truncate_prompt_tokens
    if k is None:
        return None
    max_len = model.max_model_len
    if k == -1:
        if max_len is None:
            raise InvalidRequestError(
                "truncate_prompt_tokens: -1 needs the model's context length (model.json's max_model_len "
                "or the model_files setting).",
                param="truncate_prompt_tokens",
            )
        return max_len
    if k == 0:
        raise InvalidRequestError("truncate_prompt_tokens must be -1 or at least 1", param="truncate_prompt_tokens")
    if max_len is not None and k > max_len:
        raise InvalidRequestError(
            f"truncate_prompt_tokens value ({k}) is greater than max_model_len ({max_len}). "
            "Please select a smaller truncation size.",
            param="truncate_prompt_tokens",
        )
    return k


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=True).ids)


async def _truncate(
    inputs: list[Input], keep: int, model: ServedModel, counter: TokenCounter
) -> tuple[list[Input], list[int | None]]:
    tokenizer = model.tokenizer
    out: list[Input] = []
    for item in inputs:
        if isinstance(item, str):
            if tokenizer is None:
                raise InvalidRequestError(
                    f"truncate_prompt_tokens needs the tokenizer of '{model.name}', which the gateway has not found.",
                    param="truncate_prompt_tokens",
                )
            item = await counter.count(partial(_encode, tokenizer), item)  # off the event loop when long
        out.append(item[-keep:] if len(item) > keep else item)
    return out, [len(item) for item in out]


def _check_lengths(inputs: Sequence[Input], model: ServedModel) -> None:
    """Token-id inputs over the context: refused here in vLLM's words (texts: the backend counts)."""
    max_len = model.max_model_len
    if max_len is None:
        return
    for item in inputs:
        if not isinstance(item, str) and len(item) > max_len:
            raise ContextLengthExceededError(
                f"This model's maximum context length is {max_len} tokens. However, you requested "
                f"{len(item)} tokens in the input for embedding generation. Please reduce the length of the input.",
                param="input",
            )


async def prepare_embeddings(
    body: EmbeddingCreateRequest,
    request_id: str,
    deadline: float | None,
    catalog: ModelCatalog,
    settings: Settings,
    *,
    priority: int | None = None,
) -> EmbeddingPlan:
    """Check the body alone, resolve the model, check it against the model, truncate, plan.
    ``priority``: the ``x-gateway-priority`` header's band (the scheduler's, as for generation)."""
    inputs = embedding_inputs(body)
    if len(inputs) > settings.max_embedding_inputs:
        raise InvalidRequestError(
            f"{len(inputs)} inputs; this gateway allows at most {settings.max_embedding_inputs} per request.",
            param="input",
        )
    resolved = resolve_model(body.model, await catalog.models(), settings.lora_separator)
    model = resolved.model
    check_embedding_model(body, model, resolved.adapter)
    check_token_ids(inputs, model)
    keep = _truncation(body, model)
    counts: list[int | None] = [None if isinstance(item, str) else len(item) for item in inputs]
    if keep is not None:
        inputs, counts = await _truncate(inputs, keep, model, catalog.counter)
    _check_lengths(inputs, model)
    requests = tuple(
        EmbeddingRequest(
            request_id=request_id if len(inputs) == 1 else f"{request_id}-{index}",
            model=model.name,
            input=item,
            dimensions=body.dimensions,
            deadline=deadline,
            inputs=model.inputs,
        )
        for index, item in enumerate(inputs)
    )
    return EmbeddingPlan(
        requests=requests,
        request_id=request_id,
        model_id=body.model,
        encoding_format=body.encoding_format,
        token_counts=tuple(counts),
        deadline=deadline,
        claim=plan_claim(
            None,
            priority,
            sum(
                count if count is not None else estimate_tokens(str(item))
                for count, item in zip(counts, inputs, strict=True)
            ),
            0,
        ),
    )
