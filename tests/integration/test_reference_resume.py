"""tiny-llm's stream continuation and load gauges inside a real tritonserver, over raw gRPC.

What the gateway's replica pool relies on when it moves a stream to another replica: with
``return_token_ids`` every response carries its new ids (INT64); a request resumed with
``resume_token_ids`` sends exactly the rest of the uninterrupted stream (text bytes, ids, counts,
finish reason), with the prompt's ``num_input_tokens``. And the engine-load gauges under vLLM's
names on Triton's metrics port, which the router reads. Then ``TINY_LLM_STEP_DELAY_MS``, the slow
replica of benchmarks, in a Triton of its own.
"""

from __future__ import annotations

import json
import struct
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from gateway.triton_launcher import TritonLaunchError, TritonServer

from .conftest import REFERENCE_REPOSITORY

MODEL = "tiny-llm"
PROMPT = "<|im_start|>user\nTell me a long story.<|im_end|>\n<|im_start|>assistant\n"
GREEDY = {"max_tokens": 200, "temperature": 0, "ignore_eos": True}
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")


@pytest.fixture(scope="module")
def stub(triton: TritonServer) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(triton.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def make_request(params: Mapping[str, object], resume: list[int] | None = None) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=MODEL)

    def add(name: str, datatype: str, raw: bytes, length: int = 1) -> None:
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, datatype
        tensor.shape.append(length)
        request.raw_input_contents.append(raw)

    for name, value in (("text_input", PROMPT.encode()), ("sampling_parameters", json.dumps(params).encode())):
        add(name, "BYTES", struct.pack("<I", len(value)) + value)
    for flag in ("stream", "exclude_input_in_output", "return_finish_reason", "return_num_input_tokens"):
        add(flag, "BOOL", b"\x01")
    add("return_num_output_tokens", "BOOL", b"\x01")
    add("return_token_ids", "BOOL", b"\x01")
    if resume is not None:
        add("resume_token_ids", "INT64", struct.pack(f"<{len(resume)}q", *resume), len(resume))
    return request


@dataclass
class Stream:
    """One stream's responses, decoded (one entry per response)."""

    texts: list[bytes] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    finals: list[bool] = field(default_factory=list)
    error: str | None = None

    def add(self, response: service_pb2.ModelStreamInferResponse) -> None:
        if response.error_message:
            self.error = response.error_message
            return
        infer = response.infer_response
        outputs = {o.name: (o, raw) for o, raw in zip(infer.outputs, infer.raw_output_contents, strict=True)}
        self.texts.append(outputs["text_output"][1][4:])  # one BYTES element: its length, then it
        tensor, raw = outputs["token_ids"]
        assert tensor.datatype == "INT64" and list(tensor.shape) == [len(raw) // 8]
        self.ids.append(list(struct.unpack(f"<{len(raw) // 8}q", raw)))
        self.output_tokens.append(struct.unpack("<I", outputs["num_output_tokens"][1])[0])
        self.input_tokens.append(struct.unpack("<I", outputs["num_input_tokens"][1])[0])
        self.finish_reasons.append(outputs["finish_reason"][1][4:].decode())
        self.finals.append(infer.parameters["triton_final_response"].bool_param)

    def text(self) -> bytes:
        return b"".join(self.texts)

    def all_ids(self) -> list[int]:
        return [token for ids in self.ids for token in ids]


def generate(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, params: Mapping[str, object], resume: list[int] | None = None
) -> Stream:
    stream = Stream()
    for response in stub.ModelStreamInfer(iter([make_request(params, resume)]), timeout=120):
        stream.add(response)
    assert stream.error is None, stream.error
    return stream


def read_gauges(triton: TritonServer) -> dict[str, float]:
    """tiny-llm's vllm:* gauges (labels model and version) from Triton's metrics port."""
    values = {}
    with urllib.request.urlopen(triton.metrics_url, timeout=5) as response:  # noqa: S310 - loopback
        for line in response.read().decode().splitlines():
            name, _, rest = line.partition("{")
            if name in GAUGES and 'model="tiny-llm"' in rest and 'version="1"' in rest:
                values[name] = float(line.rsplit(" ", 1)[1])
    assert set(values) == set(GAUGES), f"gauges missing from {triton.metrics_url}: {sorted(set(GAUGES) - set(values))}"
    return values


def test_a_stream_resumed_at_any_cut_continues_exactly(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    whole = generate(stub, GREEDY)
    ids = whole.all_ids()
    assert len(ids) == 200 and all(len(step) == 1 for step in whole.ids)
    assert whole.finish_reasons[-1] == "length" and whole.finals == [False] * 199 + [True]
    for cut in (1, 77, 199):
        rest = generate(stub, GREEDY, resume=ids[:cut])
        assert len(rest.texts) == 200 - cut  # nothing was sent for the replayed tokens
        assert b"".join(whole.texts[:cut]) + rest.text() == whole.text()
        assert ids[:cut] + rest.all_ids() == ids
        assert rest.output_tokens == [1] * (200 - cut)
        assert set(rest.input_tokens) == set(whole.input_tokens) and len(set(whole.input_tokens)) == 1
        assert rest.finish_reasons[-1] == "length" and rest.finals[-1] and not any(rest.finals[:-1])


def test_a_resume_that_reaches_max_tokens_answers_one_empty_final(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    params = {"max_tokens": 12, "seed": 9, "temperature": 0.8, "ignore_eos": True}
    whole = generate(stub, params)
    rest = generate(stub, params, resume=whole.all_ids())
    assert (rest.texts, rest.ids, rest.output_tokens, rest.finish_reasons, rest.finals) == (
        [b""],
        [[]],
        [0],
        ["length"],
        [True],
    )
    assert rest.input_tokens == whole.input_tokens[:1]


@pytest.mark.parametrize(
    ("params", "resume", "message"),
    [
        ({"max_tokens": 3, "n": 2}, None, "input 'return_token_ids' needs n = 1, got n = 2"),
        ({"max_tokens": 3}, [5, 99999], "input 'resume_token_ids': id 99999 at position 1 is out of the vocabulary"),
    ],
    ids=["n2", "vocabulary"],
)
def test_bad_resume_inputs_are_refused_by_name(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, params: dict[str, object], resume: list[int] | None, message: str
) -> None:
    responses = list(stub.ModelStreamInfer(iter([make_request(params, resume)]), timeout=60))
    assert len(responses) == 1 and responses[0].error_message.startswith(message)


def test_load_gauges_show_a_running_stream_then_settle_at_zero(
    triton: TritonServer, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    seen: dict[str, float] = {}
    call = stub.ModelStreamInfer(iter([make_request({**GREEDY, "max_tokens": 400})]), timeout=120)
    for received, _ in enumerate(call, start=1):
        if received == 50:
            seen = read_gauges(triton)
    assert seen["vllm:num_requests_running"] >= 1
    assert 0 < seen["vllm:kv_cache_usage_perc"] <= 1
    deadline = time.monotonic() + 10
    while (gauges := read_gauges(triton)) != dict.fromkeys(GAUGES, 0.0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gauges == dict.fromkeys(GAUGES, 0.0)


def test_step_delay_slows_every_token_of_that_triton(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, tmp_path: Path
) -> None:
    params = {"max_tokens": 20, "temperature": 0, "ignore_eos": True}
    started = time.monotonic()
    fast = generate(stub, params)
    fast_seconds = time.monotonic() - started
    slow_triton = TritonServer(
        REFERENCE_REPOSITORY,
        log_file=tmp_path / "slow.log",
        extra_args=("--model-control-mode=explicit", f"--load-model={MODEL}"),
        extra_env={"TINY_LLM_STEP_DELAY_MS": "50"},
    ).start()
    try:
        with grpc.insecure_channel(slow_triton.grpc_url) as channel:
            started = time.monotonic()
            slow = generate(service_pb2_grpc.GRPCInferenceServiceStub(channel), params)
            slow_seconds = time.monotonic() - started
    finally:
        slow_triton.stop()
    assert slow.text() == fast.text() and slow.all_ids() == fast.all_ids()  # slower, not different
    assert slow_seconds >= 20 * 0.05 > fast_seconds


def test_a_bad_step_delay_fails_the_load_with_its_name(tmp_path: Path) -> None:
    bad = TritonServer(
        REFERENCE_REPOSITORY,
        log_file=tmp_path / "bad.log",
        extra_args=("--model-control-mode=explicit", f"--load-model={MODEL}"),
        extra_env={"TINY_LLM_STEP_DELAY_MS": "slow"},
    )
    with pytest.raises(TritonLaunchError):
        bad.start()
    assert (
        "TINY_LLM_STEP_DELAY_MS must be a number of milliseconds >= 0, got 'slow'" in (tmp_path / "bad.log").read_text()
    )
