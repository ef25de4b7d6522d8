"""tiny-llm (and the test-only scripted/firehose models) inside a real tritonserver, over raw gRPC.

Proves the reference model keeps the vLLM-backend contract on the wire: streaming vs non-streaming,
finish reasons and token counts, n, determinism, LoRA, error texts, cancellation with exact custom
metrics, and concurrent streams that never mix. The last tests check that the scripted and firehose
models of tests/triton_models load and replay what gateway tests will rely on.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from gateway.triton_launcher import TritonServer

MODEL = "tiny-llm"
PROMPT = "<|im_start|>user\nTell me about Triton.<|im_end|>\n<|im_start|>assistant\n"
ALL_FLAGS = (
    "return_finish_reason",
    "return_num_input_tokens",
    "return_num_output_tokens",
    "return_cumulative_logprob",
)


@pytest.fixture(scope="module")
def server(triton: TritonServer) -> TritonServer:
    """The session's Triton: it serves the same two repositories, and a second one loading
    tiny-llm cost the run its start (~15 s). The metric checks below compare before and after."""
    return triton


@pytest.fixture(scope="module")
def stub(server: TritonServer) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def encode_bytes(values: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(value)) + value for value in values)


def decode_bytes(raw: bytes) -> list[bytes]:
    values, offset = [], 0
    while offset < len(raw):
        (length,) = struct.unpack_from("<I", raw, offset)
        values.append(raw[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return values


def make_request(
    params: dict[str, object], stream: bool, prompt: str = PROMPT, model: str = MODEL
) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model)

    def add(name: str, datatype: str, raw: bytes) -> None:
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, datatype
        tensor.shape.append(1)
        request.raw_input_contents.append(raw)

    add("text_input", "BYTES", encode_bytes([prompt.encode()]))
    add("sampling_parameters", "BYTES", encode_bytes([json.dumps(params).encode()]))
    add("stream", "BOOL", bytes([stream]))
    add("exclude_input_in_output", "BOOL", b"\x01")
    for flag in ALL_FLAGS:
        add(flag, "BOOL", b"\x01")
    return request


@dataclass
class Result:
    """Everything one stream returned, decoded."""

    texts: list[list[bytes]] = field(default_factory=list)
    finish_reasons: list[list[str]] = field(default_factory=list)
    output_tokens: list[list[int]] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)
    finals: list[bool] = field(default_factory=list)
    error: str | None = None

    def text(self, index: int = 0) -> bytes:
        return b"".join(step[index] for step in self.texts)


def add_response(result: Result, response: service_pb2.ModelStreamInferResponse) -> None:
    if response.error_message:
        result.error = response.error_message
        return
    infer = response.infer_response
    outputs = dict(zip([o.name for o in infer.outputs], infer.raw_output_contents, strict=True))
    result.texts.append(decode_bytes(outputs["text_output"]))
    result.finish_reasons.append([v.decode() for v in decode_bytes(outputs["finish_reason"])])
    count = len(outputs["num_output_tokens"]) // 4
    result.output_tokens.append(list(struct.unpack(f"<{count}I", outputs["num_output_tokens"])))
    result.input_tokens.append(struct.unpack("<I", outputs["num_input_tokens"])[0])
    result.finals.append(infer.parameters["triton_final_response"].bool_param)


def generate(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
    params: dict[str, object],
    stream: bool,
    prompt: str = PROMPT,
    model: str = MODEL,
) -> Result:
    result = Result()
    for response in stub.ModelStreamInfer(iter([make_request(params, stream, prompt, model)]), timeout=60):
        add_response(result, response)
    return result


def read_metric(server: TritonServer, name: str) -> float:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as response:  # noqa: S310 - loopback
        for line in response.read().decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} not exposed")


def wait_for_metric(server: TritonServer, name: str, expected: float, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while (value := read_metric(server, name)) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert value == expected, f"{name} is {value}, expected {expected}"


def test_streaming_deltas_concatenate_to_the_non_streaming_text(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    params = {"max_tokens": 24, "seed": 42, "temperature": 0.9}
    streamed, whole = generate(stub, params, stream=True), generate(stub, params, stream=False)
    assert streamed.error is None and whole.error is None
    assert len(whole.texts) == 1 and whole.finals == [True]
    assert streamed.text() == whole.text()
    assert streamed.finals == [False] * (len(streamed.finals) - 1) + [True]


def test_length_finish_and_token_deltas_sum_to_max_tokens(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    result = generate(stub, {"max_tokens": 9, "seed": 1, "ignore_eos": True}, stream=True)
    assert [reasons[0] for reasons in result.finish_reasons] == ["None"] * 8 + ["length"]
    assert sum(counts[0] for counts in result.output_tokens) == 9
    assert len(set(result.input_tokens)) == 1 and result.input_tokens[0] > 0


def test_eos_finishes_with_stop(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    result = generate(stub, {"max_tokens": 9, "logit_bias": {"4": 100}}, stream=True)
    assert result.finish_reasons == [["stop"]] and result.text() == b""


def test_n2_gives_two_sequences(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    result = generate(stub, {"max_tokens": 6, "seed": 3, "n": 2, "ignore_eos": True}, stream=False)
    assert len(result.texts[0]) == 2 and result.texts[0][0] != result.texts[0][1]
    assert result.output_tokens == [[6, 6]] and result.finish_reasons == [["length", "length"]]


def test_temperature_zero_is_deterministic(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    params = {"max_tokens": 16, "temperature": 0}
    assert generate(stub, params, stream=False).text() == generate(stub, params, stream=False).text()


def test_lora_adapters_change_the_output(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    texts = {
        name: generate(stub, {"max_tokens": 12, "temperature": 0, "lora_name": name}, stream=False).text()
        for name in (None, "alpha", "beta")
    }
    assert len(set(texts.values())) == 3


def test_unknown_lora_gets_the_vllm_backend_error_text(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    result = generate(stub, {"lora_name": "gamma"}, stream=True)
    assert result.error == "LoRA gamma is not supported, we currently support ['alpha', 'beta']"
    assert not result.texts


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"max_tokenz": 5}, "'max_tokenz'"),
        ({"temperature": "hot"}, "'temperature'"),
        ({"structured_outputs": "{}"}, "structured outputs: 'structured_outputs' holds no constraint"),
        ({"guided_decoding": {"regex": "(ab"}}, "structured outputs: invalid regex"),
    ],
)
def test_invalid_sampling_parameters_get_an_error_naming_the_key(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, params: dict[str, object], expected: str
) -> None:
    result = generate(stub, params, stream=True)
    assert result.error is not None and expected in result.error


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    "key_and_value",
    [("structured_outputs", json.dumps({"choice": ["yes", "no"]})), ("guided_decoding", {"choice": ["yes", "no"]})],
    ids=["json-string", "object"],
)
def test_structured_outputs_are_enforced_from_a_json_string_or_an_object(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, stream: bool, key_and_value: tuple[str, object]
) -> None:
    key, value = key_and_value
    result = generate(stub, {"max_tokens": 50, "seed": 3, "n": 4, key: value}, stream=stream)
    assert result.error is None
    assert {result.text(i) for i in range(4)} <= {b"yes", b"no"}
    # The token that completes the grammar ends the sequence: no EOS step, finish "stop".
    finals = [next(step[i] for step in result.finish_reasons if step[i] != "None") for i in range(4)]
    assert finals == ["stop"] * 4
    assert result.finals[-1] and not any(result.finals[:-1])


def test_cancelling_the_call_stops_the_work_and_counts_it(
    server: TritonServer, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    cancelled_before = read_metric(server, "tiny_llm_requests_cancelled_total")
    total_before = read_metric(server, "tiny_llm_requests_total")
    call = stub.ModelStreamInfer(iter([make_request({"max_tokens": 2000, "ignore_eos": True, "seed": 5}, stream=True)]))
    received = 0
    for _ in call:
        received += 1
        if received == 3:
            call.cancel()
            break
    assert read_metric(server, "tiny_llm_requests_total") == total_before + 1
    wait_for_metric(server, "tiny_llm_requests_cancelled_total", cancelled_before + 1)
    wait_for_metric(server, "tiny_llm_requests_in_flight", 0)


def test_concurrent_streams_each_equal_their_solo_run(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    def params(seed: int) -> dict[str, object]:
        return {"max_tokens": 20, "seed": seed, "lora_name": [None, "alpha", "beta"][seed % 3]}

    solo = {seed: generate(stub, params(seed), stream=True).text() for seed in range(8)}
    together: dict[int, bytes] = {}

    def worker(seed: int) -> None:
        together[seed] = generate(stub, params(seed), stream=True).text()

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert together == solo
    assert len(set(solo.values())) == 8


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_scripted_replays_split_utf8_and_n2_exactly(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    script = {
        "responses": [
            {"text": [b64(b"caf\xc3"), b64(b"x")], "num_output_tokens": [2, 1]},
            {"text": [b64(b"\xa9"), b64(b"")], "finish_reason": ["stop", "length"], "num_output_tokens": [1, 0]},
        ],
        "num_input_tokens": 7,
    }
    streamed = generate(stub, {}, stream=True, prompt=json.dumps(script), model="scripted")
    assert streamed.texts == [[b"caf\xc3", b"x"], [b"\xa9", b""]]
    assert streamed.finish_reasons == [["None", "None"], ["stop", "length"]]
    assert streamed.output_tokens == [[2, 1], [1, 0]] and streamed.input_tokens == [7, 7]
    assert streamed.finals == [False, True]
    whole = generate(stub, {}, stream=False, prompt=json.dumps(script), model="scripted")
    assert whole.texts == [["café".encode(), b"x"]] and whole.output_tokens == [[3, 1]]


def test_scripted_error_after_k_and_chat_wrapped_script(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    script = {"responses": [{"utf8": ["a"]}, {"utf8": ["b"]}], "error": {"message": "boom", "after": 1}}
    wrapped = f"<|im_start|>user\n{json.dumps(script)}<|im_end|>\n<|im_start|>assistant\n"
    result = generate(stub, {}, stream=True, prompt=wrapped, model="scripted")
    assert result.texts == [[b"a"]] and result.error == "boom"


def test_scripted_echo_inputs_reports_what_was_sent(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    params = {"max_tokens": 3, "seed": 9}
    result = generate(stub, params, stream=False, prompt='{"echo_inputs": true}', model="scripted")
    record = json.loads(result.text())
    assert record["sampling_parameters"] == {"max_tokens": 3, "seed": 9}
    assert record["stream"] is False and record["exclude_input_in_output"] is True


def test_scripted_hang_is_cancellable(server: TritonServer, stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    before = read_metric(server, "scripted_requests_cancelled_total")
    script = json.dumps({"hang": 30, "responses": [{"utf8": ["x"]}]})
    call = stub.ModelStreamInfer(iter([make_request({}, True, script, "scripted")]))
    threading.Timer(0.3, call.cancel).start()
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert info.value.code() == grpc.StatusCode.CANCELLED
    wait_for_metric(server, "scripted_requests_cancelled_total", before + 1)
    wait_for_metric(server, "scripted_requests_in_flight", 0)


def test_firehose_streams_max_tokens_responses(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    result = generate(stub, {"max_tokens": 200, "temperature": 0.5}, stream=True, prompt="abcd", model="firehose")
    assert len(result.texts) == 200 and result.text() == b"tok " * 200
    assert result.finish_reasons[-1] == ["length"] and result.finish_reasons[0] == ["None"]
    assert sum(c[0] for c in result.output_tokens) == 200 and result.input_tokens[0] == 4
    whole = generate(stub, {"max_tokens": 5}, stream=False, prompt="abcd", model="firehose")
    assert whole.texts == [[b"tok " * 5]] and whole.output_tokens == [[5]] and whole.finals == [True]
