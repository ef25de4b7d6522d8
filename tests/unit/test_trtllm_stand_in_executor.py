"""The tensorrt_llm stand-in's executor (tests/trtllm_stand_ins/executor.py) with a fake response
sender: response chunking, FINAL placement, echo, counts, cancellation, stop, LoRA, guides, blocks."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.trtllm_stand_ins.build import ASSETS
from tests.trtllm_stand_ins.engine import StandInEngine
from tests.trtllm_stand_ins.executor import Executor, ExecutorSettings
from tests.trtllm_stand_ins.guides import GuideCompiler
from tests.trtllm_stand_ins.reference import TINY_LLM_WEIGHTS
from tests.trtllm_stand_ins.request_tensors import parse_request
from tests.trtllm_stand_ins.tokenizer import HfTokenizer

PROMPT = [1, 50, 300, 999, 12, 7, 700, 5, 9]


class FakeSink:
    def __init__(self, cancel_after: int | None = None) -> None:
        self.responses: list[tuple[dict[str, np.ndarray], bool]] = []
        self.errors: list[str] = []
        self.closed = False
        self.done = threading.Event()
        self._cancel_after = cancel_after

    def is_cancelled(self) -> bool:
        return self._cancel_after is not None and len(self.responses) >= self._cancel_after

    def send(self, outputs: dict[str, np.ndarray], final: bool) -> None:
        self.responses.append((outputs, final))
        if final:
            self.done.set()

    def send_error(self, message: str) -> None:
        self.errors.append(message)
        self.done.set()

    def close(self) -> None:
        self.closed = True
        self.done.set()

    def ids(self) -> list[list[int]]:
        return [outputs["output_ids"].reshape(-1).tolist() for outputs, _ in self.responses]


class FakeMetrics:
    def __init__(self) -> None:
        self.cancelled = 0
        self.tokens = 0

    def request_cancelled(self) -> None:
        self.cancelled += 1

    def tokens_generated(self, count: int) -> None:
        self.tokens += count


@pytest.fixture(scope="module")
def engine() -> StandInEngine:
    return StandInEngine(TINY_LLM_WEIGHTS)


@pytest.fixture
def metrics() -> FakeMetrics:
    return FakeMetrics()


@pytest.fixture
def executor(engine: StandInEngine, metrics: FakeMetrics) -> Iterator[Executor]:
    tokenizer = HfTokenizer.load(ASSETS / "tiny-sp")
    guides = GuideCompiler(tokenizer.json, tokenizer.vocab_size, tokenizer.end_id)
    running = Executor(engine, guides, ExecutorSettings(cancellation_check_period_ms=0), metrics)
    running.start()
    yield running
    running.shutdown()


def submit(
    executor: Executor, sink: FakeSink | None = None, triton_id: str = "", decoupled: bool = True, **extra: Any
) -> FakeSink:
    arrays = {
        "input_ids": np.array([PROMPT], np.int32),
        "input_lengths": np.array([[len(PROMPT)]], np.int32),
        "request_output_len": np.array([[extra.pop("tokens", 12)]], np.int32),
    }
    arrays.update({name: np.asarray(value) for name, value in extra.items()})
    sink = sink or FakeSink()
    executor.submit(parse_request(arrays, decoupled=decoupled, exclude_input_default=False), sink, triton_id)
    assert sink.done.wait(20)
    return sink


def test_streaming_sends_the_new_tokens_in_the_knobs_cycle_with_final_on_the_last(executor: Executor) -> None:
    sink = submit(executor, streaming=[[True]], tokens=12)
    assert [len(ids) for ids in sink.ids()] == [1, 3, 2, 1, 3, 2]
    assert [final for _, final in sink.responses] == [False] * 5 + [True]


def test_not_streaming_one_response_echoes_the_prompt_unless_excluded(executor: Executor) -> None:
    echoed = submit(executor, tokens=5)
    assert len(echoed.responses) == 1 and echoed.responses[0][1]
    assert echoed.ids()[0][: len(PROMPT)] == PROMPT and len(echoed.ids()[0]) == len(PROMPT) + 5
    excluded = submit(executor, tokens=5, exclude_input_in_output=[[True]])
    assert excluded.ids()[0] == echoed.ids()[0][len(PROMPT) :]


def test_counts_are_deltas_streaming_and_include_the_echoed_prompt_otherwise(executor: Executor) -> None:
    flags = {"return_num_input_tokens": [[True]], "return_num_output_tokens": [[True]]}
    streamed = submit(executor, streaming=[[True]], tokens=6, **flags)
    assert [int(o["num_output_tokens"][0, 0]) for o, _ in streamed.responses] == [1, 3, 2]
    assert {int(o["num_input_tokens"][0, 0]) for o, _ in streamed.responses} == {len(PROMPT)}
    whole = submit(executor, tokens=6, **flags)
    assert int(whole.responses[0][0]["num_output_tokens"][0, 0]) == len(PROMPT) + 6
    assert "num_output_tokens" not in submit(executor, tokens=2).responses[0][0]


def test_log_probs_cover_this_responses_generated_tokens(executor: Executor) -> None:
    sink = submit(executor, tokens=4, return_log_probs=[[True]])
    outputs = sink.responses[0][0]
    assert outputs["output_log_probs"].shape == (1, 1, 4)
    assert float(outputs["cum_log_probs"][0, 0]) == pytest.approx(float(outputs["output_log_probs"].sum()), rel=1e-5)


def test_context_and_generation_logits_when_asked(executor: Executor) -> None:
    sink = submit(executor, tokens=3, return_context_logits=[[True]], return_generation_logits=[[True]])
    outputs = sink.responses[0][0]
    assert outputs["context_logits"].shape == (1, len(PROMPT), 1333)
    assert outputs["generation_logits"].shape == (1, 1, 3, 1333)


def test_the_end_id_is_never_returned_so_the_last_response_may_be_empty(executor: Executor) -> None:
    greedy = submit(executor, tokens=6, exclude_input_in_output=[[True]]).ids()[0]
    sink = submit(executor, tokens=6, streaming=[[True]], end_id=[[greedy[1]]])
    assert sink.ids() == [greedy[:1], []] and sink.responses[-1][1]


def test_a_cancel_ends_the_request_with_an_empty_final_and_counts(executor: Executor, metrics: FakeMetrics) -> None:
    sink = submit(executor, FakeSink(cancel_after=2), streaming=[[True]], tokens=1500)
    assert sink.closed and len(sink.responses) == 2 and not any(final for _, final in sink.responses)
    assert metrics.cancelled == 1 and metrics.tokens < 100


def test_a_stop_with_the_running_requests_id_ends_it(executor: Executor, metrics: FakeMetrics) -> None:
    sink = FakeSink()
    arrays = {
        "input_ids": np.array([PROMPT], np.int32),
        "input_lengths": np.array([[len(PROMPT)]], np.int32),
        "request_output_len": np.array([[1900]], np.int32),
        "streaming": np.array([[True]]),
    }
    executor.submit(parse_request(arrays, decoupled=True, exclude_input_default=False), sink, "job-7")
    assert executor.stop("job-7") == 1
    assert sink.done.wait(10) and sink.closed and metrics.cancelled == 1
    assert executor.stop("job-7") == 0


def test_lora_cache_miss_then_weights_then_eviction(executor: Executor) -> None:
    miss = submit(executor, tokens=4, lora_task_id=np.array([[11]], np.uint64))
    assert re.fullmatch(
        r"Executor failed process requestId \d+ due to the following error: LoRA task 11 not found in cache\. "
        r"Please send LoRA weights with request",
        miss.errors[0],
    )
    lora = {name: np.load(ASSETS / "lora" / "alpha" / f"model.lora_{name}.npy") for name in ("weights", "config")}
    adapted = submit(
        executor,
        tokens=4,
        lora_task_id=np.array([[11]], np.uint64),
        lora_weights=lora["weights"],
        lora_config=lora["config"],
    )
    again = submit(executor, tokens=4, lora_task_id=np.array([[11]], np.uint64))
    base = submit(executor, tokens=4)
    assert adapted.ids() == again.ids() != base.ids()
    beta = {name: np.load(ASSETS / "lora" / "beta" / f"model.lora_{name}.npy") for name in ("weights", "config")}
    submit(
        executor,
        tokens=1,
        lora_task_id=np.array([[12]], np.uint64),
        lora_weights=beta["weights"],
        lora_config=beta["config"],
    )
    assert "LoRA task 11 not found" in submit(executor, tokens=1, lora_task_id=np.array([[11]], np.uint64)).errors[0]


def test_beam_width_above_the_models_maximum_is_an_executor_error(executor: Executor) -> None:
    sink = submit(executor, beam_width=[[2]])
    assert re.match(
        r"Executor failed process requestId \d+ due to the following error: Requested beam width 2", sink.errors[0]
    )


def test_a_json_schema_guide_gives_valid_compact_json(executor: Executor) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    sink = submit(
        executor,
        tokens=30,
        exclude_input_in_output=[[True]],
        end_id=[[2]],
        guided_decoding_guide_type=np.array([[b"json_schema"]], object),
        guided_decoding_guide=np.array([[json.dumps(schema).encode()]], object),
    )
    text = HfTokenizer.load(ASSETS / "tiny-sp").decode(sink.ids()[0])
    assert json.loads(text) in ({"ok": True}, {"ok": False}) and " " not in text


def test_a_guide_that_does_not_compile_is_an_executor_error(executor: Executor) -> None:
    sink = submit(
        executor,
        guided_decoding_guide_type=np.array([[b"json_schema"]], object),
        guided_decoding_guide=np.array([[b"{nope"]], object),
    )
    assert sink.errors[0].startswith("Executor failed process requestId") and "JSON schema" in sink.errors[0]


def test_several_sequences_carry_their_indices_and_final_comes_once(executor: Executor) -> None:
    arrays = {
        "input_ids": np.array([PROMPT, PROMPT], np.int32),
        "input_lengths": np.array([[len(PROMPT)], [4]], np.int32),
        "request_output_len": np.array([[3], [5]], np.int32),
        "exclude_input_in_output": np.array([[True], [True]]),
    }
    sink = FakeSink()
    executor.submit(parse_request(arrays, decoupled=True, exclude_input_default=False), sink, "")
    assert sink.done.wait(10)
    assert sorted(int(o["batch_index"][0, 0]) for o, _ in sink.responses) == [0, 1]
    assert [final for _, final in sink.responses] == [False, True]


def test_prefix_blocks_are_reported_reused_on_the_second_request(executor: Executor) -> None:
    first = submit(executor, tokens=2, return_perf_metrics=[[True]]).responses[0][0]
    second = submit(executor, tokens=2, return_perf_metrics=[[True]]).responses[0][0]
    assert int(second["kv_cache_reused_blocks"][0, 0]) == (len(PROMPT) - 1) // 4
    assert int(second["kv_cache_alloc_total_blocks"][0, 0]) == -(-(len(PROMPT) + 2) // 4)
    assert (
        int(first["arrival_time_ns"][0, 0])
        <= int(first["first_token_time_ns"][0, 0])
        <= int(first["last_token_time_ns"][0, 0])
    )
