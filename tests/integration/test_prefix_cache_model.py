"""The test-only ``prefix_cache`` model (tests/triton_models/prefix_cache) inside a real tritonserver,
over ``tritonclient`` gRPC: the vLLM-backend contract, and a prefix cache that finds what it
should (same prompt, shared prefix, the previous turn with its answer), counts it in its metrics
and names it, with the request id and session, in Triton's log. Replica-routing tests rely on all
three.

One tritonserver serves the committed model and two copies with other ``parameters`` (small
blocks and cache; a slow prefill).
"""

from __future__ import annotations

import json
import queue
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import TEST_REPOSITORY, read_metric, stop_in_background, wait_for

MODEL = "prefix_cache"
SMALL = "prefix_cache_small"  # 8-char blocks, 4 blocks of cache
SLOW = "prefix_cache_slow"  # 0.2 s of prefill per uncached character
FLAGS = ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")


def configured_copy(repository: Path, name: str, parameters: dict[str, str]) -> None:
    """The committed model under ``name`` with some ``parameters`` values replaced."""
    source = TEST_REPOSITORY / MODEL
    config = (source / "config.pbtxt").read_text()
    for key, value in parameters.items():
        config, count = re.subn(rf'(key: "{key}"\s*value: \{{ string_value: ")[^"]*(")', rf"\g<1>{value}\g<2>", config)
        assert count == 1, key
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(config)
    for item in (source / "1").iterdir():
        if item.suffix in (".py", ".json"):
            (repository / name / "1" / item.name).symlink_to(item)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    repository = tmp_path_factory.mktemp("prefix-repo")
    (repository / MODEL).symlink_to(TEST_REPOSITORY / MODEL)
    configured_copy(repository, SMALL, {"block_chars": "8", "cache_blocks": "4"})
    configured_copy(repository, SLOW, {"prefill_us_per_char": "200000"})
    loads = [f"--load-model={name}" for name in (MODEL, SMALL, SLOW)]
    log = tmp_path_factory.mktemp("prefix-triton") / "tritonserver.log"
    srv = TritonServer(repository, log_file=log, extra_args=("--model-control-mode=explicit", *loads)).start()
    yield srv
    stop_in_background(srv)


@dataclass
class Result:
    texts: list[bytes] = field(default_factory=list)
    finals: list[bool] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    error: InferenceServerException | None = None

    @property
    def text(self) -> str:
        return b"".join(self.texts).decode()


def _inputs(prompt: str, stream: bool, sampling: dict[str, Any] | str) -> list[grpcclient.InferInput]:
    raw = sampling if isinstance(sampling, str) else json.dumps(sampling)
    values: list[tuple[str, np.ndarray, str]] = [
        ("text_input", np.array([prompt.encode()], dtype=np.object_), "BYTES"),
        ("sampling_parameters", np.array([raw.encode()], dtype=np.object_), "BYTES"),
        ("stream", np.array([stream]), "BOOL"),
        *((flag, np.array([True]), "BOOL") for flag in FLAGS),
    ]
    inputs = []
    for name, array, datatype in values:
        tensor = grpcclient.InferInput(name, [1], datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def generate(
    server: TritonServer,
    prompt: str,
    *,
    model: str = MODEL,
    stream: bool = True,
    sampling: dict[str, Any] | str = '{"max_tokens": 4}',
    request_id: str = "",
) -> Result:
    """One request on its own gRPC stream, read to its FINAL flag (or error)."""
    replies: queue.Queue[tuple[Any, InferenceServerException | None]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    result = Result()
    try:
        client.async_stream_infer(
            model,
            _inputs(prompt, stream, sampling),
            request_id=request_id,
            enable_empty_final_response=True,
        )
        while True:
            reply, error = replies.get(timeout=60)
            if error is not None:
                result.error = error
                return result
            final = reply.get_response().parameters["triton_final_response"].bool_param
            result.finals.append(final)
            if reply.as_numpy("text_output") is not None:
                result.texts.append(reply.as_numpy("text_output")[0])
                result.finish_reasons.append(reply.as_numpy("finish_reason")[0].decode())
                result.input_tokens.append(int(reply.as_numpy("num_input_tokens")[0]))
                result.output_tokens.append(int(reply.as_numpy("num_output_tokens")[0]))
            if final:
                return result
    finally:
        client.stop_stream()
        client.close()


def logged(server: TritonServer, request_id: str) -> dict[str, str]:
    """The fields of the model's log line for ``request_id`` (waits for Triton to write it)."""
    pattern = re.compile(rf"prefix_cache request id={re.escape(request_id)} (.*?)\"?$", re.MULTILINE)
    found: list[str] = []

    def appeared() -> bool:
        found[:] = pattern.findall(server.log_file.read_text(errors="replace")) if server.log_file else []
        return bool(found)

    assert wait_for(appeared, timeout=10), f"no log line for {request_id}:\n{server.log_tail()}"
    assert len(found) == 1, found
    return dict(part.split("=", 1) for part in found[0].split())


def cached(server: TritonServer, prompt: str, model: str = MODEL, **options: Any) -> int:
    request_id = f"req-{uuid.uuid4().hex}"
    result = generate(server, prompt, model=model, request_id=request_id, **options)
    assert result.error is None, result.error
    return int(logged(server, request_id)["cached_chars"])


def unique(chars: int) -> str:
    """A prompt of exactly ``chars`` characters that no other test sends."""
    return (uuid.uuid4().hex * (chars // 32 + 1))[:chars]


def test_streams_max_tokens_responses_with_the_vllm_outputs(server: TritonServer) -> None:
    prompt = unique(37)
    result = generate(server, prompt, sampling={"max_tokens": 5, "temperature": 0.3})
    assert result.text == "tok " * 5 and result.finals == [False] * 4 + [True]
    assert result.finish_reasons == ["None"] * 4 + ["length"]
    assert result.output_tokens == [1] * 5 and result.input_tokens == [37] * 5


def test_not_streaming_sends_one_final_response(server: TritonServer) -> None:
    result = generate(server, unique(20), stream=False, sampling={"max_tokens": 3})
    assert result.texts == [b"tok " * 3] and result.finals == [True]
    assert (result.finish_reasons, result.output_tokens) == (["length"], [3])


def test_default_max_tokens_is_16(server: TritonServer) -> None:
    assert generate(server, unique(20), sampling={}).output_tokens == [1] * 16


def test_bad_sampling_parameters_end_the_stream_with_an_error(server: TritonServer) -> None:
    result = generate(server, unique(20), sampling='{"max_tokens": -1}')
    assert result.error is not None  # a stream's error carries its text only, not its status code
    assert "prefix_cache: 'max_tokens' and 'n' must be positive integers" in str(result.error)


def test_same_prompt_twice_hits_every_full_block(server: TritonServer) -> None:
    prompt = unique(100)
    assert cached(server, prompt) == 0
    assert cached(server, prompt) == 96  # 6 blocks of 16; the 4-char tail is never cached


def test_shared_prefix_hits_up_to_where_prompts_differ(server: TritonServer) -> None:
    system = unique(64)
    assert cached(server, system + "first question, long enough to fill blocks") == 0
    assert cached(server, system + "second question, long enough to fill blocks") == 64
    assert cached(server, "x" + system) == 0  # the same text one character later shares nothing


def test_next_turn_finds_the_previous_prompt_and_its_answer(server: TritonServer) -> None:
    turn_one = unique(50)
    answer = generate(server, turn_one, sampling={"max_tokens": 8}).text
    turn_two = turn_one + answer + "and now a follow-up question"
    assert cached(server, turn_two) == (len(turn_one + answer) // 16) * 16


def test_metrics_count_prompt_and_hit_characters(server: TritonServer) -> None:
    names = (
        "prefix_cache_requests_total",
        "prefix_cache_prompt_chars_total",
        "prefix_cache_hit_chars_total",
        "prefix_cache_hit_requests_total",
    )

    def snapshot() -> list[float]:
        return [read_metric(server.metrics_url, name) for name in names]

    prompt = unique(40)
    before = snapshot()
    cached(server, prompt)
    cached(server, prompt)
    after = snapshot()
    assert [b - a for a, b in zip(before, after, strict=True)] == [2, 80, 32, 1]


def test_log_line_names_request_id_and_session(server: TritonServer) -> None:
    prompt = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nsession:conv_7-b hi " + unique(20)
    generate(server, prompt, request_id="chat-abc-1")
    expected = {"session": "conv_7-b", "cached_chars": "0", "prompt_chars": str(len(prompt))}
    assert logged(server, "chat-abc-1") == expected
    generate(server, unique(20), request_id="no-session-1")
    assert logged(server, "no-session-1")["session"] == "-"


def test_parameters_set_block_size_and_capacity(server: TritonServer) -> None:
    one, two = unique(20), unique(40)
    assert cached(server, one, model=SMALL) == 0
    assert cached(server, one, model=SMALL) == 16  # 8-char blocks
    cached(server, two, model=SMALL)  # 5 blocks: more than the 4 the cache holds
    assert cached(server, one, model=SMALL) == 0  # evicted


def test_cancelled_prefill_frees_the_prefill_for_the_next_request(server: TritonServer) -> None:
    prompt = unique(800)  # 160 s of prefill at 0.2 s per character
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: None)
    client.async_stream_infer(SLOW, _inputs(prompt, True, {"max_tokens": 4}), request_id="slow-cancelled")
    logged(server, "slow-cancelled")  # admitted: its blocks are in the cache, its prefill is running
    client.stop_stream(cancel_requests=True)
    client.close()
    # One uncached character (0.2 s) behind a prefill that would hold for minutes if not released.
    assert cached(server, prompt + "!", model=SLOW) == 800
