"""Request intake and the single scheduler thread that runs every generation.

Why one thread: ``execute`` must return at once (decoupled model; Triton calls it again for the next
request), and the engine must never run two forwards at the same time because peft's active adapter
is global model state. So ``execute`` only validates and enqueues; one thread owns the engine and
round-robins one token step per active request. That gives interleaved progress for concurrent
streams, a cancellation check between any two tokens, and no lock around the model at all.

Metrics are exact by construction: ``requests_total`` counts every request at arrival, each admitted
request is added to ``in_flight`` once and removed once (before its final response is sent, so a
client that saw the end of its stream reads a settled gauge), and ``cancelled_total`` counts requests
whose work stopped because the client cancelled (before or during generation).

The engine-load gauges (vLLM's names: running, waiting, KV cache usage) are published by this
thread after each round, from its own lists: running = the active jobs, waiting = the jobs queued
behind them (``max_num_seqs``) or not yet taken in. A change of running or waiting is published at
once; the KV usage alone (it grows with every token) at most every ``LOAD_PUBLISH_INTERVAL``, as
each publication is a message to the Triton process and scrapes come about once a second.

A resumed request (``resume_token_ids``) replays its ids in turns of ``REPLAY_STEPS_PER_TURN``
decode steps, in the same round-robin as generation: a long replay catches up in a few rounds
while every other stream waits at most that many steps (about 20 ms) for its next token. Replay
steps send nothing and are not slowed by the step delay, which stands for a slow engine's tokens.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from contract import OutputOptions, RawRequest, RequestError, build_outputs, image_lines, resume_ids
from engine import TinyLlmEngine
from generator import Generation, PromptTooLongError, ReplayError, SequenceDelta, merge_deltas
from grammar import GrammarError
from sampling_params import SamplingLimits, SamplingParamsError, parse_sampling_parameters

logger = logging.getLogger(__name__)

SHUTDOWN_MESSAGE = "tiny-llm is shutting down; the request was not completed"
REPLAY_STEPS_PER_TURN = 16
LOAD_PUBLISH_INTERVAL = 0.1


class ResponseSink(Protocol):
    """Where one request's responses go (Triton's response sender in production, a fake in tests)."""

    def is_cancelled(self) -> bool: ...

    def send(self, outputs: dict[str, np.ndarray], final: bool) -> None: ...

    def send_error(self, message: str) -> None:
        """Send an INVALID_ARG/INTERNAL error response carrying the FINAL flag."""

    def close(self) -> None:
        """Send the FINAL flag with no response (after a cancellation)."""


class ModelMetrics(Protocol):
    """The custom metrics; see the module docstring for when each moves."""

    def request_received(self) -> None: ...

    def request_cancelled(self) -> None: ...

    def in_flight_add(self, delta: int) -> None: ...

    def engine_load(self, running: int, waiting: int, kv_usage: float) -> None:
        """Set the engine-load gauges (called on the scheduler thread only)."""


class InvalidRequestError(ValueError):
    """Anything the client got wrong; its message becomes an INVALID_ARG error response."""


@dataclass
class Job:
    """One admitted request: its generation plus how to answer it."""

    sink: ResponseSink
    generation: Generation
    num_input_tokens: int
    stream: bool
    options: OutputOptions
    prefix: bytes = b""
    preamble: bytes = b""
    """Said before the first token of every sequence: one line per image (``image_lines``)."""
    accumulated: list[SequenceDelta | None] = field(default_factory=list)

    @property
    def num_sequences(self) -> int:
        return self.generation.params.n


def prepare_job(raw: RawRequest, engine: TinyLlmEngine, sink: ResponseSink) -> Job:
    """Validate and tokenize a request (in the caller's thread); raise InvalidRequestError."""
    limits = SamplingLimits(
        vocab_size=engine.vocab_size,
        max_logprobs=engine.config.max_logprobs,
        max_n=engine.config.max_num_seqs,
        lora_names=engine.adapter_names,
    )
    try:
        prompt = raw.prompt()
        params = parse_sampling_parameters(raw.sampling_parameters, limits)
        prompt_ids = engine.tokenize(prompt)
        resumed = resume_ids(raw, params.n, engine.vocab_size)
        generation = Generation(engine, prompt_ids, params, resumed)
        if len(raw.images) > engine.config.max_images:  # as vLLM's limit_mm_per_prompt refuses them
            raise RequestError(
                f"At most {engine.config.max_images} image(s) may be provided in one prompt, got {len(raw.images)}"
            )
        # A resumed request said its image lines before its first token, on the first replica.
        preamble = image_lines(raw.images) if raw.images and not resumed else b""
    except (RequestError, SamplingParamsError, PromptTooLongError, GrammarError) as exc:
        raise InvalidRequestError(str(exc)) from None
    stream = bool(raw.stream)
    # Like vLLM: the prompt is echoed only when not streaming and exclude_input_in_output is not true.
    echo = not stream and not raw.exclude_input_in_output
    return Job(
        sink=sink,
        generation=generation,
        num_input_tokens=len(prompt_ids),
        stream=stream,
        options=OutputOptions.from_request(raw),
        prefix=(raw.text_input or b"") if echo else b"",
        preamble=preamble,
        accumulated=[None] * params.n,
    )


class Scheduler:
    """Owns the engine thread. ``handle`` is called from ``execute``; everything else runs inside."""

    def __init__(self, engine: TinyLlmEngine, metrics: ModelMetrics, step_delay: float = 0.0) -> None:
        """``step_delay``: seconds slept after each generated step of a request (a slow engine)."""
        self._engine = engine
        self._metrics = metrics
        self._step_delay = step_delay
        self._published: tuple[int, int, float] | None = None
        self._published_at = 0.0
        self._incoming: queue.Queue[Job | None] = queue.Queue()
        self._waiting: deque[Job] = deque()
        self._active: list[Job] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tiny-llm-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the thread; requests still running get an error response (never a silent hang)."""
        self._stopping.set()
        self._incoming.put(None)
        self._thread.join(timeout)

    def handle(self, raw: RawRequest, sink: ResponseSink) -> None:
        """Intake of one request: count it, drop it if already cancelled, validate, enqueue."""
        self._metrics.request_received()
        if sink.is_cancelled():
            self._metrics.request_cancelled()
            sink.close()
            return
        try:
            job = prepare_job(raw, self._engine, sink)
        except InvalidRequestError as exc:
            sink.send_error(str(exc))
            return
        self._metrics.in_flight_add(1)
        self._incoming.put(job)

    # --- everything below runs on the scheduler thread -------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._take_incoming(block=not self._active and not self._waiting)
            self._admit()
            for job in list(self._active):
                self._advance(job)
            self._publish_load()
        for job in [*self._active, *self._waiting, *self._drain_incoming()]:
            self._release(job)
            self._safely(job, lambda job=job: job.sink.send_error(SHUTDOWN_MESSAGE))
        self._metrics.engine_load(0, 0, 0.0)

    def _publish_load(self) -> None:
        running, waiting = len(self._active), len(self._waiting) + self._incoming.qsize()
        now = time.monotonic()
        previous = self._published
        if (
            previous is not None
            and previous[:2] == (running, waiting)
            and now - self._published_at < LOAD_PUBLISH_INTERVAL
        ):
            return
        tokens = sum(job.generation.tokens_held for job in self._active)
        load = (running, waiting, min(1.0, tokens / self._engine.config.kv_cache_tokens))
        if load != previous:
            self._metrics.engine_load(*load)
            self._published = load
        self._published_at = now

    def _drain_incoming(self) -> list[Job]:
        jobs = []
        while True:
            try:
                job = self._incoming.get_nowait()
            except queue.Empty:
                return jobs
            if job is not None:
                jobs.append(job)

    def _take_incoming(self, block: bool) -> None:
        if block:
            job = self._incoming.get()
            if job is not None:
                self._waiting.append(job)
        self._waiting.extend(self._drain_incoming())

    def _admit(self) -> None:
        """Move waiting jobs to active while the max_num_seqs budget allows (always admit one)."""
        running = sum(job.num_sequences for job in self._active)
        while self._waiting:
            job = self._waiting[0]
            if self._active and running + job.num_sequences > self._engine.config.max_num_seqs:
                return
            self._waiting.popleft()
            if job.sink.is_cancelled():
                self._cancel(job)
                continue
            self._active.append(job)
            running += job.num_sequences

    def _step(self, job: Job) -> list[SequenceDelta] | None:
        """The job's turn: a slice of its replay (None: nothing to send), or one generated step.
        After a replay that ended the request, ``step()`` gives its empty final delta."""
        generation = job.generation
        if generation.replaying:
            generation.replay(REPLAY_STEPS_PER_TURN)
            if not generation.finished:
                return None
        generated = not generation.finished
        deltas = generation.step()
        if generated and self._step_delay:
            self._stopping.wait(self._step_delay)
        return deltas

    def _advance(self, job: Job) -> None:
        if job.sink.is_cancelled():
            self._cancel(job)
            return
        try:
            deltas = self._step(job)
        except Exception as exc:  # noqa: BLE001 - any engine failure becomes that request's error
            if not isinstance(exc, ReplayError):
                logger.exception("tiny-llm generation failed")
            self._finish(job)
            message = str(exc) if isinstance(exc, ReplayError) else f"Error generating stream: {exc}"
            self._safely(job, lambda: job.sink.send_error(message))
            return
        if deltas is None:
            return
        if job.preamble:
            deltas = [dataclasses.replace(delta, text=job.preamble + delta.text) for delta in deltas]
            job.preamble = b""
        final = job.generation.finished
        if job.stream:
            outputs = build_outputs(deltas, job.options, job.num_input_tokens)
        else:
            job.accumulated = [merge_deltas(old, new) for old, new in zip(job.accumulated, deltas, strict=True)]
            if not final:
                return
            merged = [delta for delta in job.accumulated if delta is not None]
            outputs = build_outputs(merged, job.options, job.num_input_tokens, job.prefix)
        if final:
            self._finish(job)
        if not self._safely(job, lambda: job.sink.send(outputs, final)) and not final:
            self._finish(job)
            self._metrics.request_cancelled()

    def _safely(self, job: Job, action: object) -> bool:
        """Run a send; a failure (the client is gone) must not kill the scheduler thread."""
        try:
            action()  # type: ignore[operator]
        except Exception:  # noqa: BLE001
            logger.warning("tiny-llm could not send a response; dropping the request", exc_info=True)
            return False
        return True

    def _release(self, job: Job) -> None:
        self._metrics.in_flight_add(-1)

    def _finish(self, job: Job) -> None:
        if job in self._active:
            self._active.remove(job)
        self._release(job)

    def _cancel(self, job: Job) -> None:
        if job in self._active:
            self._active.remove(job)
        self._release(job)
        self._metrics.request_cancelled()
        self._safely(job, job.sink.close)
