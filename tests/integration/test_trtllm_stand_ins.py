"""The TensorRT-LLM stand-ins (tests/triton_models_trtllm) behave as the contract says, on a real
tritonserver, through Triton's own gRPC API (ModelStreamInfer and ModelInfer; no gateway).

Token-level expectations are computed here from the tiny-sp tokenizer and from the
``tensorrt_llm`` stand-in's own greedy tokens (a model with random weights: the text is
meaningless, but the same prompt always gives the same tokens), so every assertion is exact.
"""

from __future__ import annotations

import json
import queue
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tokenizers import Tokenizer
from tritonclient.utils import InferenceServerException

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import read_metric, stop_in_background, wait_for
from tests.integration.trtllm_stack import LORA_ADAPTERS, TOKENIZER_DIR, start_trtllm_triton

PROMPT = "Deep learning is a gateway to the model"
STREAMING_NOT_DECOUPLED = "Streaming is only supported if model is deployed using decoupled mode."
_DTYPES = {
    np.dtype(np.int32): "INT32",
    np.dtype(np.uint32): "UINT32",
    np.dtype(np.uint64): "UINT64",
    np.dtype(np.float32): "FP32",
    np.dtype(np.float16): "FP16",
    np.dtype(np.bool_): "BOOL",
    np.dtype(object): "BYTES",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    directory = tmp_path_factory.mktemp("trtllm")
    server = start_trtllm_triton(directory, directory / "tritonserver.log")
    yield server
    stop_in_background(server)


@pytest.fixture(scope="module")
def client(stack: TritonServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(stack.grpc_url) as triton:
        yield triton


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))


def tensor(name: str, value: Any, dtype: Any = None) -> grpcclient.InferInput:
    array = np.array(value, dtype=dtype)
    if array.dtype.kind in "US":
        array = np.vectorize(lambda item: str(item).encode("utf-8"), otypes=[object])(array)
    item = grpcclient.InferInput(name, list(array.shape), _DTYPES[array.dtype])
    item.set_data_from_numpy(array)
    return item


def text(value: str) -> list[list[str]]:
    return [[value]]


@dataclass
class Response:
    outputs: dict[str, Any]
    final: bool

    def text(self) -> str:
        return bytes(self.outputs["text_output"].reshape(-1)[0]).decode("utf-8")

    def ids(self) -> list[int]:
        return [int(token) for token in self.outputs["output_ids"].reshape(-1)]


def stream(
    client: grpcclient.InferenceServerClient,
    model: str,
    inputs: list[grpcclient.InferInput],
    request_id: str = "",
    cancel_after: int | None = None,
) -> tuple[list[Response], str | None]:
    """One request over its own gRPC stream, empty final response asked for; (responses, error)."""
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    responses: list[Response] = []
    error = None
    try:
        client.async_stream_infer(model, inputs, request_id=request_id, enable_empty_final_response=True)
        while True:
            result, failure = results.get(timeout=30)
            if failure is not None:
                error = failure.message()
                if model.startswith("tensorrt_llm_bls"):
                    continue  # the BLS sends its empty FINAL after the error
                break
            response = result.get_response()
            outputs = {out.name: result.as_numpy(out.name) for out in response.outputs}
            responses.append(Response(outputs, response.parameters["triton_final_response"].bool_param))
            if responses[-1].final or (cancel_after is not None and len(responses) >= cancel_after):
                break
    finally:
        client.stop_stream(cancel_requests=cancel_after is not None)
    return responses, error


def engine_inputs(
    tokenizer: Tokenizer, prompt: str = PROMPT, tokens: int = 12, **extra: Any
) -> list[grpcclient.InferInput]:
    ids = tokenizer.encode(prompt).ids
    inputs = [
        tensor("input_ids", [ids], np.int32),
        tensor("input_lengths", [[len(ids)]], np.int32),
        tensor("request_output_len", [[tokens]], np.int32),
    ]
    for name, (value, dtype) in extra.items():
        inputs.append(tensor(name, [[value]], dtype))
    return inputs


def ensemble_inputs(prompt: str = PROMPT, tokens: int = 12, **extra: Any) -> list[grpcclient.InferInput]:
    inputs = [tensor("text_input", text(prompt)), tensor("max_tokens", [[tokens]], np.int32)]
    for name, (value, dtype) in extra.items():
        inputs.append(tensor(name, value if isinstance(value, list) else [[value]], dtype))
    return inputs


def _one(name: str, value: Any, dtype: Any) -> dict[str, Any]:
    return {name: (value, dtype)}


STREAMING: dict[str, Any] = {"streaming": (True, np.bool_)}
EXCLUDE: dict[str, Any] = {"exclude_input_in_output": (True, np.bool_)}


def greedy_chunks(client: grpcclient.InferenceServerClient, tokenizer: Tokenizer, tokens: int) -> list[list[int]]:
    """The tensorrt_llm stand-in's streamed greedy tokens for PROMPT, response by response."""
    end_id = tokenizer.token_to_id("</s>")
    responses, error = stream(
        client, "tensorrt_llm", engine_inputs(tokenizer, tokens=tokens, end_id=(end_id, np.int32), **STREAMING)
    )
    assert error is None
    return [response.ids() for response in responses]


def test_streaming_on_the_model_that_is_not_decoupled_is_refused_with_the_backends_words(
    client: grpcclient.InferenceServerClient, tokenizer: Tokenizer
) -> None:
    with pytest.raises(InferenceServerException) as refused:
        client.infer("tensorrt_llm_nd", engine_inputs(tokenizer, **STREAMING))
    assert refused.value.message() == STREAMING_NOT_DECOUPLED
    whole = client.infer("tensorrt_llm_nd", engine_inputs(tokenizer, **EXCLUDE))
    assert whole.as_numpy("output_ids").shape == (1, 1, 12) and whole.as_numpy("sequence_length").tolist() == [[12]]


def test_streamed_responses_carry_several_new_tokens_and_final_rides_on_the_last(
    client: grpcclient.InferenceServerClient, tokenizer: Tokenizer
) -> None:
    responses, error = stream(client, "tensorrt_llm", engine_inputs(tokenizer, tokens=12, **STREAMING))
    assert error is None
    assert [len(response.ids()) for response in responses] == [1, 3, 2, 1, 3, 2]  # stand_in_tokens_per_response
    assert [response.final for response in responses] == [False] * 5 + [True]
    assert [int(r.outputs["sequence_length"].reshape(-1)[0]) for r in responses] == [1, 3, 2, 1, 3, 2]
    prompt = tokenizer.encode(PROMPT).ids  # never streamed back: the stream holds new tokens only
    whole = client.infer("tensorrt_llm_nd", engine_inputs(tokenizer, tokens=12))
    assert whole.as_numpy("output_ids").reshape(-1).tolist() == prompt + [t for r in responses for t in r.ids()]


def test_token_counts_come_only_when_asked_with_the_cpp_semantics(
    client: grpcclient.InferenceServerClient, tokenizer: Tokenizer
) -> None:
    prompt_length = len(tokenizer.encode(PROMPT).ids)
    plain, _ = stream(client, "tensorrt_llm", engine_inputs(tokenizer, **STREAMING))
    assert all("num_input_tokens" not in r.outputs and "num_output_tokens" not in r.outputs for r in plain)
    counts: dict[str, Any] = {"return_num_input_tokens": (True, np.bool_), "return_num_output_tokens": (True, np.bool_)}
    streamed, _ = stream(client, "tensorrt_llm", engine_inputs(tokenizer, **STREAMING, **counts))
    assert [int(r.outputs["num_input_tokens"].reshape(-1)[0]) for r in streamed] == [prompt_length] * len(streamed)
    assert [int(r.outputs["num_output_tokens"].reshape(-1)[0]) for r in streamed] == [1, 3, 2, 1, 3, 2]
    echoed = client.infer("tensorrt_llm_nd", engine_inputs(tokenizer, **counts))
    assert echoed.as_numpy("num_output_tokens").tolist() == [[prompt_length + 12]]  # the echoed prompt counts
    excluded = client.infer("tensorrt_llm_nd", engine_inputs(tokenizer, **counts, **EXCLUDE))
    assert excluded.as_numpy("num_output_tokens").tolist() == [[12]]
    only_input = client.infer("tensorrt_llm_nd", engine_inputs(tokenizer, return_num_input_tokens=(True, np.bool_)))
    assert only_input.as_numpy("num_output_tokens") is None and only_input.as_numpy("num_input_tokens").tolist() == [
        [prompt_length]
    ]


def test_the_prompt_is_echoed_by_default_when_not_streaming(
    client: grpcclient.InferenceServerClient, tokenizer: Tokenizer
) -> None:
    prompt = tokenizer.encode(PROMPT).ids
    echoed = client.infer("tensorrt_llm_nd", engine_inputs(tokenizer, tokens=4)).as_numpy("output_ids").reshape(-1)
    assert echoed[: len(prompt)].tolist() == prompt and echoed.size == len(prompt) + 4
    through_ensemble = client.infer("ensemble_nd", ensemble_inputs(tokens=4)).as_numpy("text_output")
    assert bytes(through_ensemble.reshape(-1)[0]).decode().startswith(PROMPT)
    excluded = client.infer("ensemble_nd", ensemble_inputs(tokens=4, exclude_input_in_output=(True, np.bool_)))
    assert not bytes(excluded.as_numpy("text_output").reshape(-1)[0]).decode().startswith(PROMPT)


def test_ensemble_streaming_decodes_each_response_alone_and_loses_the_spaces_one_decode_keeps(
    client: grpcclient.InferenceServerClient, tokenizer: Tokenizer
) -> None:
    chunks = greedy_chunks(client, tokenizer, 24)
    responses, error = stream(client, "ensemble", ensemble_inputs(tokens=24, stream=(True, np.bool_)))
    assert error is None
    deltas = [response.text() for response in responses if "text_output" in response.outputs]
    assert deltas == [tokenizer.decode(chunk) for chunk in chunks]
    all_tokens = [token for chunk in chunks for token in chunk]
    whole = client.infer("ensemble_nd", ensemble_inputs(tokens=24, exclude_input_in_output=(True, np.bool_)))
    assert bytes(whole.as_numpy("text_output").reshape(-1)[0]).decode() == tokenizer.decode(all_tokens)
    starts_with_space = [
        chunk for chunk in chunks[1:] if chunk and str(tokenizer.id_to_token(chunk[0])).startswith("▁")
    ]
    assert starts_with_space, "the greedy tokens should start some response with a ▁-piece"
    assert "".join(deltas).count(" ") < tokenizer.decode(all_tokens).count(" ")


def test_bls_accumulating_sends_cumulative_text_then_a_separate_empty_final(
    client: grpcclient.InferenceServerClient, tokenizer: Tokenizer
) -> None:
    chunks = greedy_chunks(client, tokenizer, 12)
    responses, error = stream(client, "tensorrt_llm_bls_acc", ensemble_inputs(tokens=12, stream=(True, np.bool_)))
    assert error is None
    data, last = responses[:-1], responses[-1]
    so_far: list[int] = []
    expected = []
    for chunk in chunks:
        so_far += chunk
        expected.append(tokenizer.decode(so_far))
    assert [response.text() for response in data] == expected
    assert not any(response.final for response in data)
    assert last.final and last.outputs == {}
    deltas, _ = stream(client, "tensorrt_llm_bls", ensemble_inputs(tokens=12, stream=(True, np.bool_)))
    assert [response.text() for response in deltas[:-1]] == [tokenizer.decode(chunk) for chunk in chunks]


def test_bls_forwards_token_counts_and_ignores_num_return_sequences(client: grpcclient.InferenceServerClient) -> None:
    counts: dict[str, Any] = {"return_num_output_tokens": (True, np.bool_), "num_return_sequences": (3, np.int32)}
    responses, error = stream(client, "tensorrt_llm_bls", ensemble_inputs(tokens=6, stream=(True, np.bool_), **counts))
    assert error is None
    data = responses[:-1]
    assert sum(int(r.outputs["num_output_tokens"].reshape(-1)[0]) for r in data) == 6
    assert all("sequence_index" not in r.outputs for r in data)  # one sequence, not three


@pytest.mark.parametrize(
    ("name", "value", "dtype", "expected"),
    [
        ("runtime_top_k", -1, np.int32, r"^\[TensorRT-LLM\]\[ERROR\] Assertion failed: top_k \(-1\) must be >= 0$"),
        ("runtime_top_p", 1.5, np.float32, r"top_p \(1.5\) must be in \(0, 1\]"),
        ("temperature", -0.5, np.float32, r"temperature \(-0.5\) must be >= 0"),
        (
            "beam_width",
            2,
            np.int32,
            r"^Executor failed process requestId \d+ due to the following error: Requested beam width 2",
        ),
    ],
)
def test_out_of_range_sampling_is_one_final_error(
    client: grpcclient.InferenceServerClient, tokenizer: Tokenizer, name: str, value: Any, dtype: Any, expected: str
) -> None:
    responses, error = stream(client, "tensorrt_llm", engine_inputs(tokenizer, **_one(name, value, dtype)))
    assert responses == [] and error is not None and re.search(expected, error), error


def test_top_p_zero_means_unset(client: grpcclient.InferenceServerClient, tokenizer: Tokenizer) -> None:
    unset = client.infer("tensorrt_llm_nd", engine_inputs(tokenizer, tokens=6, runtime_top_p=(0.0, np.float32)))
    greedy = client.infer("tensorrt_llm_nd", engine_inputs(tokenizer, tokens=6))
    assert unset.as_numpy("output_ids").tolist() == greedy.as_numpy("output_ids").tolist()


def _lora(name: str) -> dict[str, tuple[Any, Any]]:
    directory = LORA_ADAPTERS[name]
    return {
        "weights": (np.load(directory / "model.lora_weights.npy"), np.float16),
        "config": (np.load(directory / "model.lora_config.npy"), np.int32),
    }


def _lora_inputs(tokenizer: Tokenizer, task: int, adapter: str | None) -> list[grpcclient.InferInput]:
    inputs = engine_inputs(tokenizer, tokens=8, lora_task_id=(task, np.uint64), **EXCLUDE)
    if adapter is not None:
        arrays = _lora(adapter)
        inputs.append(tensor("lora_weights", arrays["weights"][0], np.float16))
        inputs.append(tensor("lora_config", arrays["config"][0], np.int32))
    return inputs


def test_lora_cache_miss_then_weights_then_switching_adapters_evicts(
    client: grpcclient.InferenceServerClient, tokenizer: Tokenizer
) -> None:
    miss = r"^Executor failed process requestId \d+ due to the following error: LoRA task 71 not found in cache\. Please send LoRA weights with request$"
    _, error = stream(client, "tensorrt_llm", _lora_inputs(tokenizer, 71, None))
    assert error is not None and re.match(miss, error), error
    alpha, error = stream(client, "tensorrt_llm", _lora_inputs(tokenizer, 71, "alpha"))
    assert error is None
    cached, _ = stream(client, "tensorrt_llm", _lora_inputs(tokenizer, 71, None))
    assert cached[0].ids() == alpha[0].ids()
    beta, _ = stream(client, "tensorrt_llm", _lora_inputs(tokenizer, 72, "beta"))
    base = client.infer("tensorrt_llm_nd", engine_inputs(tokenizer, tokens=8, **EXCLUDE)).as_numpy("output_ids")
    assert len({tuple(alpha[0].ids()), tuple(beta[0].ids()), tuple(base.reshape(-1).tolist())}) == 3
    _, error = stream(client, "tensorrt_llm", _lora_inputs(tokenizer, 71, None))  # one task fits: alpha is gone
    assert error is not None and "LoRA task 71 not found in cache" in error


def test_the_v05_ensemble_takes_uint32_and_triton_refuses_int32(client: grpcclient.InferenceServerClient) -> None:
    words = [tensor("bad_words", text("")), tensor("stop_words", text(""))]
    _, error = stream(
        client, "ensemble_v05", [tensor("text_input", text(PROMPT)), tensor("max_tokens", [[4]], np.int32), *words]
    )
    assert error is not None
    assert "inference input 'max_tokens' data-type is 'INT32', but model 'ensemble_v05' expects 'UINT32'" in error
    responses, error = stream(
        client, "ensemble_v05", [tensor("text_input", text(PROMPT)), tensor("max_tokens", [[4]], np.uint32), *words]
    )
    assert error is None and responses[-1].final and responses[0].text().startswith(PROMPT)
    assert set(responses[0].outputs) == {"text_output"}  # no token counts in that release


def test_llmapi_reports_length_at_the_cap_and_none_while_running(client: grpcclient.InferenceServerClient) -> None:
    inputs = [
        tensor("text_input", [PROMPT]),
        tensor("sampling_param_max_tokens", [6], np.int32),
        tensor("streaming", [True], np.bool_),
        tensor("return_finish_reason", [True], np.bool_),
    ]
    responses, error = stream(client, "llmapi", inputs)
    assert error is None and responses[-1].final
    reasons = [bytes(r.outputs["finish_reason"][0]).decode() for r in responses]
    assert reasons[-1] == "length" and set(reasons[:-1]) <= {"None"}
    texts = [r.text() for r in responses]
    assert all(
        later.startswith(earlier) or "\ufffd" in earlier for earlier, later in zip(texts, texts[1:], strict=False)
    )
    plain, _ = stream(
        client, "llmapi", [tensor("text_input", [PROMPT]), tensor("sampling_param_max_tokens", [3], np.int32)]
    )
    assert set(plain[-1].outputs) == {"text_output"} and plain[-1].text().startswith(PROMPT)


def test_guided_json_schema_gives_json_that_validates(client: grpcclient.InferenceServerClient) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no"]}, "count": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["answer", "count"],
        "additionalProperties": False,
    }
    guide: dict[str, Any] = {
        "guided_decoding_guide_type": ([["json_schema"]], None),
        "guided_decoding_guide": ([[json.dumps(schema)]], None),
        "exclude_input_in_output": (True, np.bool_),
    }
    reply = client.infer("ensemble_nd", ensemble_inputs(tokens=40, **guide))
    output = json.loads(bytes(reply.as_numpy("text_output").reshape(-1)[0]).decode())
    jsonschema.validate(output, schema)
    ignored: dict[str, Any] = {
        **guide,
        "guided_decoding_guide_type": ([["xml"]], None),
    }  # unknown types constrain nothing
    assert client.infer("ensemble_nd", ensemble_inputs(tokens=4, **ignored)).as_numpy("text_output") is not None


def test_a_cancel_stops_the_work_of_the_model_and_of_the_bls_call(
    stack: TritonServer, client: grpcclient.InferenceServerClient, tokenizer: Tokenizer
) -> None:
    def cancelled() -> float:
        return read_metric(stack.metrics_url, "trtllm_stand_in_requests_cancelled_total", default=0.0)

    def generated() -> float:
        return read_metric(stack.metrics_url, "trtllm_stand_in_tokens_generated_total", default=0.0)

    before = cancelled()
    responses, _ = stream(client, "tensorrt_llm", engine_inputs(tokenizer, tokens=1900, **STREAMING), cancel_after=2)
    assert len(responses) == 2
    assert wait_for(lambda: cancelled() >= before + 1, timeout=10)
    settled = generated()
    time.sleep(0.3)
    assert generated() == settled  # nothing generates any more
    bls, _ = stream(client, "tensorrt_llm_bls", ensemble_inputs(tokens=1900, stream=(True, np.bool_)), cancel_after=2)
    assert len(bls) == 2
    assert wait_for(lambda: cancelled() >= before + 2, timeout=10)  # the BLS stopped its tensorrt_llm call
    v05 = [
        tensor("text_input", text(PROMPT)),
        tensor("max_tokens", [[1900]], np.uint32),
        tensor("stream", [[True]], np.bool_),
    ]
    v05 += [tensor("bad_words", text("")), tensor("stop_words", text(""))]
    llmapi = [tensor("text_input", [PROMPT]), tensor("sampling_param_max_tokens", [1900], np.int32)]
    llmapi.append(tensor("streaming", [True], np.bool_))
    for model, inputs in (("ensemble_v05", v05), ("llmapi", llmapi)):
        seen = cancelled()
        assert len(stream(client, model, inputs, cancel_after=2)[0]) == 2
        assert wait_for(lambda seen=seen: cancelled() >= seen + 1, timeout=10), model
    assert "cancelled by Triton cancellation" in stack.log_tail(400)


def test_a_stop_request_with_the_running_requests_id_ends_it(
    client: grpcclient.InferenceServerClient, tokenizer: Tokenizer
) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        long_request = engine_inputs(tokenizer, tokens=1900, **STREAMING)
        client.async_stream_infer("tensorrt_llm", long_request, request_id="long-1", enable_empty_final_response=True)
        results.get(timeout=10)
        stop = engine_inputs(tokenizer, tokens=1, stop=(True, np.bool_))
        client.async_stream_infer("tensorrt_llm", stop, request_id="long-1", enable_empty_final_response=True)
        finals = 0
        deadline = time.monotonic() + 10
        while finals < 2 and time.monotonic() < deadline:
            result, error = results.get(timeout=10)
            assert error is None
            if result.get_response().parameters["triton_final_response"].bool_param:
                finals += 1
        assert finals == 2  # the stop request's empty FINAL, and the long request's
    finally:
        client.stop_stream()
