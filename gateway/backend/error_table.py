"""How Triton's failures become the gateway's typed errors (``gateway/errors.py``).

A failure reaches the backend in one of two shapes:

- a gRPC status that ends the call (``CallError`` from a stream transport, ``AioRpcError`` from a
  control call): its code says what happened, and ``classify_rpc_error`` maps it by
  ``STATUS_ERRORS``;
- an error inside the stream (``ModelStreamInferResponse.error_message``): Triton puts the model's
  text, or its own, there without a code, so ``classify_stream_error`` reads the text against
  ``MESSAGE_RULES``, first match wins. A text no rule knows is a 500 that carries it.

Each rule says where its texts come from; ``tests/unit/test_error_table.py`` holds real ones for
every rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import grpc

from gateway.backend.transport.base import CallError
from gateway.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    BackendUnreachableError,
    ContextLengthExceededError,
    GatewayError,
    InvalidRequestError,
    ModelNotFoundError,
)

_FIELDS = {"structured_outputs": "response_format"}
"""vLLM's name of a field → the OpenAI request field the client set."""


@dataclass(frozen=True, slots=True)
class MessageRule:
    """One row of the table: a text ``pattern`` finds becomes ``error``, its message the
    backend's text (after ``explain``)."""

    name: str
    pattern: re.Pattern[str]
    error: type[GatewayError]
    param: str | None = None
    """The request field the error names; a pattern with a ``param`` group names the field the
    text names instead (in OpenAI's terms: ``_FIELDS``)."""
    explain: str = ""
    """Put before the backend's text where that text alone would mislead the client."""
    retry_after: bool = False
    """Answer ``Retry-After: 1``: the server cannot take work now, a retry or another replica can."""

    def build(self, match: re.Match[str], message: str) -> GatewayError:
        param = self.param
        if "param" in self.pattern.groupindex:
            param = _FIELDS.get(match["param"], match["param"])
        headers = {"Retry-After": "1"} if self.retry_after else None
        return self.error(self.explain + message, param=param, headers=headers)


MESSAGE_RULES: tuple[MessageRule, ...] = (
    # A structured-outputs constraint (response_format, or structured_outputs in extra_body) that
    # the backend cannot use. tiny-llm starts these texts with "structured outputs:" (grammar.py and
    # structured_outputs.py beside its model.py); vLLM's request checks say "Structured outputs ..."
    # (vllm/v1/engine/processor.py), and "guided decoding" in the versions before 0.11 renamed it
    # ("Unknown guided decoding backend '<b>'. ..." in vllm/model_executor/guided_decoding);
    # xgrammar's compile failures start with "Grammar error:". vLLM's texts arrive behind the vLLM
    # backend's "Error generating stream: ".
    MessageRule(
        "structured-outputs",
        re.compile(r"structured output|guided decoding|Grammar error", re.I),
        InvalidRequestError,
        param="response_format",
    ),
    # An adapter the model was not loaded with: the vLLM backend's _verify_loras answers before the
    # engine sees the request, "LoRA <name> is not supported, we currently support [<names>]" or, on
    # a model loaded without enable_lora, "LoRA feature is not enabled."; tiny-llm the first.
    MessageRule(
        "unknown-adapter",
        re.compile(r"LoRA .* is not supported|LoRA feature is not enabled"),
        ModelNotFoundError,
        param="model",
    ),
    # A prompt over the context. vLLM's input processor: "The decoder prompt (length <n>) [plus the
    # number of requested output tokens (at least 1)] is longer than the maximum model length of
    # <m>. ..." (tiny-llm the same); vLLM's renderer, which checks first in recent versions:
    # "This model's maximum context length is <m> tokens. However, your prompt contains ...".
    MessageRule(
        "context-length",
        re.compile(r"prompt \(length \d+\).* longer than the maximum model length|maximum context length is \d+"),
        ContextLengthExceededError,
        param="messages",
    ),
    # An embedding request to a model vLLM runs as a generator: the vLLM backend's "Model <m> does
    # not support 'embed' request" (the gateway found no runner in model.json and was told none).
    MessageRule(
        "unsupported-task",
        re.compile(r"does not support 'embed' request"),
        InvalidRequestError,
        param="model",
    ),
    # An empty prompt: vLLM's input processor, "The decoder prompt cannot be empty"; tiny-llm the same.
    MessageRule("empty-prompt", re.compile(r"prompt cannot be empty"), InvalidRequestError),
    # Sampling parameters vLLM refused, its reason swallowed: the vLLM backend's
    # TritonSamplingParams.from_dict logs vLLM's exception in Triton's log and returns None, and the
    # request then dies on None.lora_name. Only that refusal produces this text.
    MessageRule(
        "refused-sampling",
        re.compile(r"'NoneType' object has no attribute 'lora_name'"),
        InvalidRequestError,
        explain="The backend refused the sampling parameters (Triton's vLLM backend logs vLLM's reason in "
        "Triton's log and does not return it): ",
    ),
    # vLLM's VLLMValidationError ends its text with "(parameter=<field>, value=<value>)": the field
    # the client got wrong is named (stop_token_ids, logprobs, logit_bias...).
    MessageRule(
        "named-parameter", re.compile(r"\(parameter=(?P<param>\w+)(, value=.*)?\)$", re.S), InvalidRequestError
    ),
    # The vLLM backend's health check found the engine dead and unloads the model: "Model is
    # unavailable due to unhealthy vLLM engine" (sent with code UNAVAILABLE, which the stream does
    # not carry). The server cannot take work: the replica pool ejects it.
    MessageRule("unhealthy-engine", re.compile(r"unhealthy vLLM engine"), BackendUnreachableError, retry_after=True),
    # A model the server does not serve now. Triton's own texts for a model or version it does not
    # have: "Request for unknown model: '<m>' is not found", "... '<m>' version <v> is not found",
    # "... '<m>' has no available versions" (unloaded); the Python backend's for a BLS call to a model
    # that is not ready: "Failed for execute the inference request. Model '<m>' is not ready."
    # ("unavailable model" matches no text of Triton 2.51, its vLLM backend or vLLM.)
    MessageRule(
        "model-not-served",
        re.compile(r"unknown model|is not found|not ready|unavailable model", re.I),
        BackendUnavailableError,
    ),
    # TensorRT-LLM's LoRA cache holds no adapter it may evict ("Cache is full. There are no done
    # tasks to evict", peftCacheManager): every slot is in use by a running request. A retry later,
    # or another replica, can serve it.
    MessageRule(
        "lora-cache-full",
        re.compile(r"Cache is full\. There are no done tasks to evict"),
        BackendUnavailableError,
        retry_after=True,
    ),
    # TensorRT-LLM's checks of a request (samplingConfig.cpp's TLLM_CHECKs, thrown while the C++
    # backend converts the request or by the executor: "Executor failed process requestId <n> due
    # to the following error: [TensorRT-LLM][ERROR] Assertion failed: ..."; the Python variant's
    # "An error occurred when processing the input values for request id <x>, ..."): the request,
    # not the server, is at fault.
    MessageRule(
        "trtllm-refused-request",
        re.compile(
            r"(Executor failed process requestId \d+|processing the input values).*(Assertion failed|must be)", re.S
        ),
        InvalidRequestError,
    ),
    # Any other request the backend refused: tiny-llm's checks of sampling_parameters
    # ("sampling_parameters: unknown key '<k>'; tiny-llm supports [...]", "sampling_parameters:
    # '<k>' must be ..."). "not supported by", "invalid sampling", "unknown sampling" and
    # "INVALID_ARG" (Triton's code name in a model's text) match no recorded text: other engines'
    # wordings of the same refusal.
    MessageRule(
        "refused-request",
        re.compile(r"not supported by|invalid sampling|unknown sampling|sampling_parameters|INVALID_ARG", re.I),
        InvalidRequestError,
    ),
)


def classify_stream_error(message: str) -> GatewayError:
    """The typed error for an error text sent inside the stream: the first rule of
    ``MESSAGE_RULES`` that finds it, else a 500 ``BackendError`` that carries the text."""
    for rule in MESSAGE_RULES:
        match = rule.pattern.search(message)
        if match:
            return rule.build(match, message)
    return BackendError(message)


STATUS_ERRORS: dict[grpc.StatusCode, type[GatewayError]] = {
    grpc.StatusCode.UNAVAILABLE: BackendUnreachableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: BackendTimeoutError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
    grpc.StatusCode.NOT_FOUND: BackendUnavailableError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: BackendUnavailableError,
}
"""A call's gRPC status → the typed error; any other status is a 500 ``BackendError``. UNAVAILABLE
is the server itself (no connection, a lost one, a GOAWAY), not one model: the replica pool ejects
it."""

_STATUS_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


def classify_rpc_error(error: grpc.aio.AioRpcError | CallError) -> GatewayError:
    """The typed error for a gRPC status (of a grpc.aio call or of one of our streams)."""
    if isinstance(error, CallError):
        code, details = _STATUS_BY_NUMBER.get(error.code, grpc.StatusCode.UNKNOWN), error.details
    else:
        code, details = error.code(), error.details()
    error_type = STATUS_ERRORS.get(code, BackendError)
    details = details or code.name
    if issubclass(error_type, BackendUnavailableError):
        return error_type(f"Triton is unavailable: {details}", headers={"Retry-After": "1"})
    if error_type is BackendTimeoutError:
        return BackendTimeoutError("the request's deadline passed before the backend finished")
    return error_type(f"Triton error: {details}")
