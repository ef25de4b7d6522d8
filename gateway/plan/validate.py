"""What vLLM would refuse, refused before Triton is called. Pure.

Triton's vLLM backend cannot report most of vLLM's refusals: ``TritonSamplingParams.from_dict``
logs the validation error and returns None, and the request then dies on ``None.lora_name``. So
every check vLLM makes that the gateway can make too, and that the schema does not already make,
is made here, with vLLM's wording and the field named:

- ``SamplingParams._verify_args``: ``min_tokens`` at most ``max_tokens`` (in ``budget.py``, against
  the ``max_tokens`` actually sent). Not its "n must be 1 when using greedy sampling": each choice
  is a request of its own (``n`` 1), so ``n`` greedy choices are n answers, as OpenAI gives them;
- ``SamplingParams.verify``: ``stop_token_ids``, ``logit_bias`` and ``allowed_token_ids`` ids within
  the vocabulary (negative ids always; the upper bound when the model's tokenizer is known), and
  ``allowed_token_ids`` not empty;
- the input processor: an empty prompt (in ``budget.py``: it needs the token count);
- the chat request's ``tools``/``tool_choice`` consistency (vLLM's ``check_tool_usage``);
- ``structured_outputs``: exactly one constraint (``StructuredOutputsParams.__post_init__``), and
  not together with a JSON ``response_format`` (which vLLM would turn into a second constraint).

Plus one refusal of the gateway's own: ``logit_bias`` for a model whose backend cannot carry it.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.config import Settings
from gateway.errors import InvalidRequestError
from gateway.models.catalog import ServedModel
from gateway.plan.requests import INT32_MAX, ChatCompletionRequest, CompletionRequest, SamplingFields


def check_request(body: SamplingFields, model: ServedModel, settings: Settings) -> None:
    """Every check here but the prompt's (``budget.py`` makes those, per prompt)."""
    if model.embeds:
        raise InvalidRequestError(
            f"The model '{model.name}' is an embedding model (run as pooling): it serves /v1/embeddings only.",
            param="model",
        )
    if body.allowed_token_ids is not None and not body.allowed_token_ids:
        raise InvalidRequestError("allowed_token_ids is not None and empty!", param="allowed_token_ids")
    if body.stop_token_ids or body.logit_bias or body.allowed_token_ids:
        vocab = model.tokenizer.get_vocab_size() if model.tokenizer is not None else None
        checked = (
            ("stop_token_ids", body.stop_token_ids or ()),
            ("logit_bias", _bias_ids(body)),
            ("allowed_token_ids", body.allowed_token_ids or ()),
        )
        for name, ids in checked:
            _check_ids(name, ids, vocab)
    if isinstance(body, ChatCompletionRequest):
        check_tool_choice(body)
    check_structured_outputs(body)
    if body.logit_bias and not carries_logit_bias(model, settings):
        raise InvalidRequestError(
            f"'logit_bias' is not supported by the model '{model.name}': Triton's vLLM backend hands vLLM "
            "the token ids as JSON strings, which vLLM cannot use.",
            param="logit_bias",
        )


def check_structured_outputs(body: SamplingFields) -> None:
    """One constraint in ``structured_outputs``, and no JSON ``response_format`` beside it."""
    if body.structured_outputs is None:
        return
    fmt = body.response_format if isinstance(body, (ChatCompletionRequest, CompletionRequest)) else None
    if fmt is not None and fmt.type != "text":
        raise InvalidRequestError(
            f"'structured_outputs' cannot be combined with a 'response_format' of type '{fmt.type}': give one of them.",
            param="structured_outputs",
        )
    constraints = body.structured_outputs.constraints()
    if len(constraints) != 1:
        found = f"got {constraints}" if constraints else "got none"
        raise InvalidRequestError(
            f"'structured_outputs' must hold exactly one constraint among json, json_object, regex, choice and "
            f"grammar; {found}.",
            param="structured_outputs",
        )


def carries_logit_bias(model: ServedModel, settings: Settings) -> bool:
    """Whether ``logit_bias`` reaches the model's sampler.

    Triton's vLLM backend (``backend: "vllm"``) passes ``sampling_parameters`` to vLLM as parsed
    JSON, whose object keys are strings, and vLLM fails on them (any other encoding fails too). A
    ``python`` model may be our reference model (which converts them) or a copy of that same
    backend: Triton cannot tell them apart, so a per-model setting decides where it matters.
    """
    override = settings.model_limits.get(model.name)
    if override is not None and override.logit_bias is not None:
        return override.logit_bias
    return model.backend != "vllm"


def _bias_ids(body: SamplingFields) -> list[int]:
    return [int(key) for key in body.logit_bias or {}]


def _check_ids(name: str, ids: Iterable[int], vocab: int | None) -> None:
    """Negative ids first (refused whatever the model), then ids past the vocabulary when it is known,
    else past int32 (what the backend's tensors carry)."""
    ids = list(ids)
    negative = [i for i in ids if i < 0]
    if negative:
        raise InvalidRequestError(
            f"token_id(s) {negative} in {name} contain out-of-vocab token ids. Token ids cannot be negative",
            param=name,
        )
    end = vocab if vocab is not None else INT32_MAX + 1
    past = [i for i in ids if i >= end]
    if past:
        known = f"Vocabulary size: {vocab}" if vocab is not None else f"Token ids are below {end}"
        raise InvalidRequestError(f"token_id(s) {past} in {name} contain out-of-vocab token ids. {known}", param=name)


def check_tool_choice(body: ChatCompletionRequest) -> None:
    """``tool_choice`` must agree with ``tools`` (as vLLM and OpenAI require), even though tool
    calling itself is refused later: the error then names the client's actual mistake."""
    if body.tools is not None and not body.tools:
        raise InvalidRequestError(
            "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.",
            param="tools",
        )
    choice = body.tool_choice
    if choice is None or choice == "none":
        return
    if body.tools is None:
        raise InvalidRequestError("When using `tool_choice`, `tools` must be set.", param="tool_choice")
    if choice in ("auto", "required"):
        return
    usage = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
    if not isinstance(choice, dict):
        raise InvalidRequestError(
            f'Invalid value for `tool_choice`: {choice}! Only named tools, "none", "auto" or "required" are supported.',
            param="tool_choice",
        )
    function = choice.get("function")
    if not isinstance(function, dict):
        raise InvalidRequestError(
            f"Invalid value for `function`: `{function}` in `tool_choice`! {usage}", param="tool_choice.function"
        )
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(
            f"Invalid `name` in `function`: `{name}` in `tool_choice`! {usage}", param="tool_choice.function.name"
        )
    if not any(_tool_name(tool) == name for tool in body.tools):
        raise InvalidRequestError(
            "The tool specified in `tool_choice` does not match any of the specified `tools`", param="tool_choice"
        )


def _tool_name(tool: object) -> object:
    function = tool.get("function") if isinstance(tool, dict) else None
    return function.get("name") if isinstance(function, dict) else None
