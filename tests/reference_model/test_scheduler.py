"""The scheduler thread with fake senders: stream framing, interleaving, cancellation, exact metrics."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import pytest
from contract import FINISH_REASON, NUM_INPUT_TOKENS, NUM_OUTPUT_TOKENS, TEXT_OUTPUT, TOKEN_IDS, RawRequest
from engine import TinyLlmEngine
from PIL import Image
from scheduler import SHUTDOWN_MESSAGE, Scheduler

PROMPT = b"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


class FakeSink:
    """Records responses; can turn cancelled after a number of sends."""

    def __init__(self, cancel_after: int | None = None) -> None:
        self.responses: list[tuple[dict[str, np.ndarray], bool]] = []
        self.errors: list[str] = []
        self.closed = False
        self.cancel_after = cancel_after
        self.done = threading.Event()

    def is_cancelled(self) -> bool:
        return self.cancel_after is not None and len(self.responses) >= self.cancel_after

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

    def text(self, index: int = 0) -> bytes:
        return b"".join(outputs[TEXT_OUTPUT][index] for outputs, _ in self.responses)

    def token_ids(self) -> list[int]:
        return [int(token) for outputs, _ in self.responses for token in outputs[TOKEN_IDS]]


class FakeMetrics:
    def __init__(self) -> None:
        self.total = 0
        self.cancelled = 0
        self.in_flight = 0
        self.loads: list[tuple[int, int, float]] = []
        """Every engine_load publication: (running, waiting, kv_usage)."""
        self._lock = threading.Lock()

    def request_received(self) -> None:
        with self._lock:
            self.total += 1

    def request_cancelled(self) -> None:
        with self._lock:
            self.cancelled += 1

    def in_flight_add(self, delta: int) -> None:
        with self._lock:
            self.in_flight += delta
            assert self.in_flight >= 0

    def engine_load(self, running: int, waiting: int, kv_usage: float) -> None:
        assert 0.0 <= kv_usage <= 1.0
        with self._lock:
            self.loads.append((running, waiting, kv_usage))


@pytest.fixture
def metrics() -> FakeMetrics:
    return FakeMetrics()


@pytest.fixture
def scheduler(engine: TinyLlmEngine, metrics: FakeMetrics) -> Iterator[Scheduler]:
    scheduler = Scheduler(engine, metrics)
    scheduler.start()
    yield scheduler
    scheduler.shutdown()


def request(stream: bool = True, prompt: bytes = PROMPT, **params: object) -> RawRequest:
    return RawRequest(
        text_input=prompt,
        sampling_parameters=json.dumps(params).encode(),
        stream=stream,
        exclude_input_in_output=True,
        return_finish_reason=True,
        return_num_input_tokens=True,
        return_num_output_tokens=True,
    )


def submit(scheduler: Scheduler, raw: RawRequest, sink: FakeSink | None = None) -> FakeSink:
    sink = sink or FakeSink()
    scheduler.handle(raw, sink)
    return sink


def wait(*sinks: FakeSink) -> None:
    for sink in sinks:
        assert sink.done.wait(30), "no final response"


def test_stream_sends_one_response_per_token_and_final_on_the_last(scheduler: Scheduler, metrics: FakeMetrics) -> None:
    sink = submit(scheduler, request(max_tokens=6, seed=1))
    wait(sink)
    assert [final for _, final in sink.responses] == [False] * 5 + [True]
    assert [str(o[FINISH_REASON][0]) for o, _ in sink.responses] == ["None"] * 5 + ["length"]
    assert sum(int(o[NUM_OUTPUT_TOKENS][0]) for o, _ in sink.responses) == 6
    assert all(o[NUM_INPUT_TOKENS].dtype == np.uint32 for o, _ in sink.responses)
    assert (metrics.total, metrics.cancelled, metrics.in_flight) == (1, 0, 0)


def test_non_stream_sends_one_response_equal_to_the_stream(scheduler: Scheduler) -> None:
    streamed = submit(scheduler, request(max_tokens=20, seed=2))
    whole = submit(scheduler, request(stream=False, max_tokens=20, seed=2))
    wait(streamed, whole)
    assert len(whole.responses) == 1 and whole.responses[0][1] is True
    assert whole.text() == streamed.text()
    assert int(whole.responses[0][0][NUM_OUTPUT_TOKENS][0]) == 20


def test_non_stream_echoes_the_prompt_unless_excluded(scheduler: Scheduler) -> None:
    raw = RawRequest(text_input=PROMPT, sampling_parameters=b'{"max_tokens": 3, "seed": 1}', stream=False)
    echoed = submit(scheduler, raw)
    plain = submit(scheduler, request(stream=False, max_tokens=3, seed=1))
    wait(echoed, plain)
    assert echoed.text() == PROMPT + plain.text()
    assert set(echoed.responses[0][0]) == {TEXT_OUTPUT}  # no return_* flag: no optional output


def test_invalid_request_gets_an_error_and_is_not_in_flight(scheduler: Scheduler, metrics: FakeMetrics) -> None:
    sink = submit(scheduler, request(bogus=1))
    wait(sink)
    assert "'bogus'" in sink.errors[0]
    missing = submit(scheduler, RawRequest(text_input=None))
    wait(missing)
    assert "text_input" in missing.errors[0]
    bad_regex = submit(scheduler, request(structured_outputs=json.dumps({"regex": "(ab"})))
    wait(bad_regex)
    assert bad_regex.errors[0].startswith("structured outputs: invalid regex")
    assert (metrics.total, metrics.in_flight) == (3, 0)


def test_request_cancelled_before_start_is_closed_without_work(scheduler: Scheduler, metrics: FakeMetrics) -> None:
    sink = submit(scheduler, request(max_tokens=5), FakeSink(cancel_after=0))
    wait(sink)
    assert sink.closed and not sink.responses
    assert (metrics.total, metrics.cancelled, metrics.in_flight) == (1, 1, 0)


def test_cancel_mid_stream_stops_at_once(scheduler: Scheduler, metrics: FakeMetrics) -> None:
    sink = submit(scheduler, request(max_tokens=500, seed=3), FakeSink(cancel_after=3))
    wait(sink)
    assert sink.closed and len(sink.responses) == 3
    assert not any(final for _, final in sink.responses)
    assert (metrics.cancelled, metrics.in_flight) == (1, 0)


def test_concurrent_streams_never_mix_and_match_solo_runs(scheduler: Scheduler) -> None:
    solo = {}
    for seed in range(4):
        sink = submit(scheduler, request(max_tokens=15, seed=seed, lora_name=[None, "alpha", "beta"][seed % 3]))
        wait(sink)
        solo[seed] = sink.text()
    together = {
        seed: submit(scheduler, request(max_tokens=15, seed=seed, lora_name=[None, "alpha", "beta"][seed % 3]))
        for seed in range(4)
    }
    wait(*together.values())
    assert {seed: sink.text() for seed, sink in together.items()} == solo


def test_n2_stream_carries_two_elements_per_response(scheduler: Scheduler) -> None:
    sink = submit(scheduler, request(max_tokens=4, seed=8, n=2))
    wait(sink)
    assert all(o[TEXT_OUTPUT].shape == (2,) for o, _ in sink.responses)
    assert sink.text(0) != sink.text(1)


def test_shutdown_answers_running_requests_with_an_error(engine: TinyLlmEngine, metrics: FakeMetrics) -> None:
    scheduler = Scheduler(engine, metrics)
    scheduler.start()
    sink = submit(scheduler, request(max_tokens=2000, ignore_eos=True))
    while not sink.responses:
        threading.Event().wait(0.01)
    scheduler.shutdown()
    wait(sink)
    assert sink.errors == [SHUTDOWN_MESSAGE]
    assert metrics.in_flight == 0


def _png_base64(width: int, height: int, color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format="PNG")
    return base64.b64encode(out.getvalue())


def test_images_are_said_before_the_answer_one_line_each(scheduler: Scheduler) -> None:
    images = (_png_base64(2, 3, (1, 2, 3)), _png_base64(4, 1, (9, 9, 9)))
    plain = submit(scheduler, request(max_tokens=4, seed=3))
    seen = submit(scheduler, dataclasses.replace(request(max_tokens=4, seed=3), images=images))
    whole = submit(scheduler, dataclasses.replace(request(stream=False, max_tokens=4, seed=3), images=images))
    wait(plain, seen, whole)
    first = hashlib.sha256(bytes((1, 2, 3)) * 6).hexdigest()[:16]
    second = hashlib.sha256(bytes((9, 9, 9)) * 4).hexdigest()[:16]
    lines = f"[image 2x3 {first}]\n[image 4x1 {second}]\n".encode()
    assert seen.text() == lines + plain.text()
    assert whole.text() == seen.text()
    assert sum(int(o[NUM_OUTPUT_TOKENS][0]) for o, _ in seen.responses) == 4  # the lines are no tokens


def test_more_images_than_the_limit_are_an_error(scheduler: Scheduler, engine: TinyLlmEngine) -> None:
    images = (_png_base64(1, 1, (0, 0, 0)),) * (engine.config.max_images + 1)
    sink = submit(scheduler, dataclasses.replace(request(max_tokens=2), images=images))
    assert sink.errors and f"At most {engine.config.max_images} image(s)" in sink.errors[0]


def test_an_element_that_is_not_an_image_is_an_error(scheduler: Scheduler) -> None:
    sink = submit(scheduler, dataclasses.replace(request(max_tokens=2), images=(base64.b64encode(b"text"),)))
    wait(sink)
    assert sink.errors and "'image' element 0" in sink.errors[0]


class ResizedEngine:
    """The session's engine under other model.json numbers (max_num_seqs, kv_cache_tokens)."""

    def __init__(self, engine: TinyLlmEngine, **config: Any) -> None:
        self._engine = engine
        self.config = dataclasses.replace(engine.config, **config)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def resumable(stream: bool = True, resume: tuple[int, ...] | None = None, **params: Any) -> RawRequest:
    return dataclasses.replace(request(stream, **params), return_token_ids=True, resume_token_ids=resume)


def test_token_ids_are_sent_only_when_asked_one_per_streamed_token(scheduler: Scheduler) -> None:
    asked = submit(scheduler, resumable(max_tokens=6, seed=4, ignore_eos=True))
    plain = submit(scheduler, request(max_tokens=6, seed=4, ignore_eos=True))
    whole = submit(scheduler, resumable(stream=False, max_tokens=6, seed=4, ignore_eos=True))
    wait(asked, plain, whole)
    assert all(
        outputs[TOKEN_IDS].dtype == np.int64 and outputs[TOKEN_IDS].shape == (1,) for outputs, _ in asked.responses
    )
    assert all(TOKEN_IDS not in outputs for outputs, _ in plain.responses)
    assert len(asked.token_ids()) == 6 and whole.token_ids() == asked.token_ids()
    assert asked.text() == plain.text() == whole.text()


@pytest.mark.parametrize("stream", [True, False])
def test_a_resumed_request_sends_only_what_follows_the_replayed_ids(scheduler: Scheduler, stream: bool) -> None:
    # The stop string never matches, but holds back every "e" for a step: cuts land on held bytes.
    params: dict[str, Any] = {"max_tokens": 30, "seed": 6, "temperature": 0.8, "ignore_eos": True, "stop": ["e\x07"]}
    first = submit(scheduler, resumable(**params))
    wait(first)
    ids = first.token_ids()
    for cut in (1, 12, 29):
        rest = submit(scheduler, resumable(stream, tuple(ids[:cut]), **params))
        wait(rest)
        streamed_before = b"".join(outputs[TEXT_OUTPUT][0] for outputs, _ in first.responses[:cut])
        assert streamed_before + rest.text() == first.text()
        assert rest.token_ids() == ids[cut:]
        counts = [int(outputs[NUM_OUTPUT_TOKENS][0]) for outputs, _ in rest.responses]
        assert sum(counts) == len(ids) - cut and len(rest.responses) == (len(ids) - cut if stream else 1)
        assert {int(outputs[NUM_INPUT_TOKENS][0]) for outputs, _ in rest.responses} == {
            int(first.responses[0][0][NUM_INPUT_TOKENS][0])
        }
        assert str(rest.responses[-1][0][FINISH_REASON][0]) == str(first.responses[-1][0][FINISH_REASON][0])


def test_a_replay_that_ends_the_request_answers_one_empty_final(scheduler: Scheduler, metrics: FakeMetrics) -> None:
    first = submit(scheduler, resumable(max_tokens=5, seed=1, ignore_eos=True))
    wait(first)
    rest = submit(scheduler, resumable(resume=tuple(first.token_ids()), max_tokens=5, seed=1, ignore_eos=True))
    wait(rest)
    ((outputs, final),) = rest.responses
    assert final and list(outputs[TEXT_OUTPUT]) == [b""] and outputs[TOKEN_IDS].shape == (0,)
    assert int(outputs[NUM_OUTPUT_TOKENS][0]) == 0 and str(outputs[FINISH_REASON][0]) == "length"
    assert metrics.in_flight == 0


def test_a_resumed_request_does_not_repeat_its_image_lines(scheduler: Scheduler) -> None:
    images = (_png_base64(2, 2, (5, 6, 7)),)
    first = submit(scheduler, dataclasses.replace(resumable(max_tokens=6, seed=3, ignore_eos=True), images=images))
    wait(first)
    raw = resumable(resume=tuple(first.token_ids()[:2]), max_tokens=6, seed=3, ignore_eos=True)
    rest = submit(scheduler, dataclasses.replace(raw, images=images))
    wait(rest)
    assert first.responses[0][0][TEXT_OUTPUT][0].startswith(b"[image 2x2 ")
    assert b"".join(outputs[TEXT_OUTPUT][0] for outputs, _ in first.responses[:2]) + rest.text() == first.text()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (resumable(max_tokens=3, n=2), "input 'return_token_ids' needs n = 1, got n = 2"),
        (
            dataclasses.replace(request(max_tokens=3, n=2), resume_token_ids=(5,)),
            "input 'resume_token_ids' needs n = 1, got n = 2",
        ),
        (
            resumable(resume=(5, 1333), max_tokens=3),
            "input 'resume_token_ids': id 1333 at position 1 is out of the vocab",
        ),
        (
            resumable(resume=(97,), max_tokens=3, structured_outputs=json.dumps({"json_object": True})),
            "input 'resume_token_ids': id 97 at position 0 is not allowed there by the structured-output grammar",
        ),
    ],
    ids=["return-n2", "resume-n2", "vocabulary", "grammar"],
)
def test_bad_resume_inputs_get_an_error_naming_the_input(
    scheduler: Scheduler, metrics: FakeMetrics, raw: RawRequest, message: str
) -> None:
    sink = submit(scheduler, raw)
    wait(sink)
    assert not sink.responses and len(sink.errors) == 1 and sink.errors[0].startswith(message)
    assert metrics.in_flight == 0


def test_load_gauges_count_running_waiting_and_kv_then_settle_at_zero(
    engine: TinyLlmEngine, metrics: FakeMetrics
) -> None:
    small = ResizedEngine(engine, max_num_seqs=1, kv_cache_tokens=10_000)
    scheduler = Scheduler(cast(TinyLlmEngine, small), metrics, step_delay=0.01)
    scheduler.start()
    try:
        sinks = [submit(scheduler, request(max_tokens=8, seed=seed, ignore_eos=True)) for seed in range(2)]
        wait(*sinks)
        deadline = time.monotonic() + 10
        while metrics.loads[-1] != (0, 0, 0.0) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        scheduler.shutdown()
    prompt = len(engine.tokenize(PROMPT.decode()))
    assert any(running == 1 and waiting == 1 for running, waiting, _ in metrics.loads)  # max_num_seqs 1
    assert all(running <= 1 for running, _, _ in metrics.loads)
    usages = [usage for _, _, usage in metrics.loads if usage]
    assert usages and all(prompt / 10_000 <= usage <= (prompt + 8) / 10_000 for usage in usages)
    assert metrics.loads[-1] == (0, 0, 0.0)


def test_kv_cache_usage_is_capped_at_one(engine: TinyLlmEngine, metrics: FakeMetrics) -> None:
    scheduler = Scheduler(cast(TinyLlmEngine, ResizedEngine(engine, kv_cache_tokens=4)), metrics)
    scheduler.start()
    try:
        wait(submit(scheduler, request(max_tokens=3, seed=1)))
    finally:
        scheduler.shutdown()
    assert (1, 0, 1.0) in metrics.loads


def test_step_delay_slows_generated_tokens_but_not_the_replay(engine: TinyLlmEngine, metrics: FakeMetrics) -> None:
    scheduler = Scheduler(engine, metrics, step_delay=0.05)
    scheduler.start()
    try:
        started = time.monotonic()
        first = submit(scheduler, resumable(max_tokens=40, seed=2, ignore_eos=True))
        wait(first)
        generating = time.monotonic() - started
        started = time.monotonic()
        rest = submit(
            scheduler, resumable(resume=tuple(first.token_ids()[:38]), max_tokens=40, seed=2, ignore_eos=True)
        )
        wait(rest)
        replaying = time.monotonic() - started
    finally:
        scheduler.shutdown()
    assert generating >= 40 * 0.05
    assert replaying < 20 * 0.05  # 38 replayed steps and 2 slowed ones: far below 40 slowed ones
    assert rest.token_ids() == first.token_ids()[38:]
