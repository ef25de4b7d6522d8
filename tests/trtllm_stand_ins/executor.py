"""The ``tensorrt_llm`` stand-in's executor: admission checks, caches, and when responses go out.

One ``Executor`` per model instance owns the engine, the LoRA task cache, the KV-block cache and
the scheduler thread. A converted request (``request_tensors.parse_request``) becomes a ``TrtllmJob``:

* admission runs the executor's checks (beam width against ``max_beam_width``, the prompt against
  the model's length, the LoRA cache, the guide) and fails with "Executor failed process requestId
  N due to the following error: ..." (N counted per instance from 1);
* streaming: each response carries the tokens new since the last one, several at a time: the
  ``stand_in_tokens_per_response`` cycle (default 1, 3, 2) stands in for speculative decoding, so a
  client that assumes one token per response is caught; the end id is never returned, so the last
  response may hold no token at all;
* not streaming: one response with every token, after the prompt unless it is excluded;
* the FINAL flag rides on the last data response (with several sequences: the last response of the
  last sequence to finish);
* a Triton cancel, or a ``stop`` request with this request's id, ends the request between two steps
  with an empty FINAL response (checked every ``cancellation_check_period_ms``, like the backend).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from tests.trtllm_stand_ins.engine import Adapter, StandInEngine
from tests.trtllm_stand_ins.errors import ExecutorError, executor_message
from tests.trtllm_stand_ins.generation import GenerationParams, Sequence
from tests.trtllm_stand_ins.guides import GuideCompiler, GuideError
from tests.trtllm_stand_ins.kv_blocks import BlockCache
from tests.trtllm_stand_ins.lora import LoraCache, LoraError, unpack_adapter
from tests.trtllm_stand_ins.request_tensors import GenerationSpec
from tests.trtllm_stand_ins.responses import PerfRecord, ResponseContent, trtllm_outputs
from tests.trtllm_stand_ins.scheduler import Scheduler

logger = logging.getLogger(__name__)

GUIDES_DISABLED = (
    "Guided decoding is not enabled for this model: set the model parameters guided_decoding_backend "
    "(xgrammar) and tokenizer_dir"
)


class Sink(Protocol):
    """Where one Triton request's responses go (Triton's response sender, or a fake in tests)."""

    def is_cancelled(self) -> bool: ...

    def send(self, outputs: dict[str, NDArray[Any]], final: bool) -> None: ...

    def send_error(self, message: str) -> None:
        """One error response carrying FINAL."""

    def close(self) -> None:
        """FINAL with no data (how a cancelled or stopped request ends)."""


class Metrics(Protocol):
    def request_cancelled(self) -> None: ...

    def tokens_generated(self, count: int) -> None: ...


@dataclass(frozen=True)
class ExecutorSettings:
    tokens_per_response: tuple[int, ...] = (1, 3, 2)
    max_beam_width: int = 1
    lora_cache_tasks: int = 1
    max_lora_rank: int = 64
    kv_block_size: int = 4
    cancellation_check_period_ms: float = 100.0


class Executor:
    def __init__(
        self,
        engine: StandInEngine,
        guides: GuideCompiler | None,
        settings: ExecutorSettings,
        metrics: Metrics,
        name: str = "tensorrt_llm",
    ) -> None:
        self.engine = engine
        self.guides = guides
        self.settings = settings
        self.metrics = metrics
        self.lora = LoraCache[Adapter](settings.lora_cache_tasks)
        self.blocks = BlockCache(settings.kv_block_size)
        self.scheduler = Scheduler(name)
        self._next_id = 0
        self._lock = threading.Lock()
        self._running: dict[str, list[TrtllmJob]] = {}

    def start(self) -> None:
        self.scheduler.start()

    def shutdown(self) -> None:
        self.scheduler.shutdown()

    def submit(self, specs: list[GenerationSpec], sink: Sink, triton_id: str) -> None:
        """Called from ``execute``: queue a converted request."""
        with self._lock:
            self._next_id += 1
            job = TrtllmJob(self, specs, sink, triton_id, self._next_id, time.time_ns())
            if triton_id:
                self._running.setdefault(triton_id, []).append(job)
        self.scheduler.submit(job)

    def stop(self, triton_id: str) -> int:
        """A ``stop`` request: mark every running request with that Triton id; how many there were."""
        with self._lock:
            jobs = list(self._running.get(triton_id, ()))
        for job in jobs:
            job.stop_requested = True
        return len(jobs)

    def forget(self, job: TrtllmJob) -> None:
        with self._lock:
            jobs = self._running.get(job.triton_id)
            if jobs and job in jobs:
                jobs.remove(job)
                if not jobs:
                    del self._running[job.triton_id]


@dataclass
class _Unit:
    """One sequence of a request and what is still to be sent for it."""

    spec: GenerationSpec
    sequence: Sequence
    reused_blocks: int
    first_scheduled_ns: int
    first_token_ns: int = 0
    last_token_ns: int = 0
    pending: list[int] = field(default_factory=list)
    pending_logprobs: list[float] = field(default_factory=list)
    pending_logits: list[NDArray[Any]] = field(default_factory=list)
    responses_sent: int = 0
    done: bool = False


class TrtllmJob:
    def __init__(
        self,
        executor: Executor,
        specs: list[GenerationSpec],
        sink: Sink,
        triton_id: str,
        request_id: int,
        arrival_ns: int,
    ) -> None:
        self.executor = executor
        self.specs = specs
        self.sink = sink
        self.triton_id = triton_id
        self.request_id = request_id
        self.arrival_ns = arrival_ns
        self.stop_requested = False
        self._units: list[_Unit] = []
        self._lora_tasks: list[int] = []
        self._next_cancel_check = 0.0
        self._released = False

    # --- admission ---------------------------------------------------------------------------------

    def start(self) -> bool:
        try:
            self._units = [self._admit(spec) for spec in self.specs]
        except ExecutorError as exc:
            self._release()
            self.sink.send_error(executor_message(self.request_id, str(exc)))
            return False
        return True

    def _admit(self, spec: GenerationSpec) -> _Unit:
        executor, engine = self.executor, self.executor.engine
        if spec.sampling.beam_width > executor.settings.max_beam_width:
            raise ExecutorError(
                f"Requested beam width {spec.sampling.beam_width} is larger than the model's max_beam_width "
                f"{executor.settings.max_beam_width} (the stand-in generates one beam)"
            )
        max_input = engine.max_positions - 1
        if len(spec.prompt) > max_input:
            raise ExecutorError(
                f"The prompt length ({len(spec.prompt)}) exceeds the maximum input length ({max_input})"
            )
        if any(not 0 <= token < engine.vocab_size for token in spec.prompt):
            raise ExecutorError(f"input_ids must be token ids in [0, {engine.vocab_size})")
        max_new = min(spec.max_new_tokens, engine.max_positions - len(spec.prompt))
        grammar = None
        if spec.guide is not None:
            if executor.guides is None:
                raise ExecutorError(GUIDES_DISABLED)
            try:
                grammar = executor.guides.compile(spec.guide, spec.end_id)
            except GuideError as exc:
                raise ExecutorError(str(exc)) from None
        params = GenerationParams(
            max_new_tokens=max_new,
            sampling=spec.sampling,
            end_id=spec.end_id,
            stop_words=spec.stop_words,
            bad_words=spec.bad_words,
            embedding_bias=spec.embedding_bias,
            grammar=grammar,
            adapter=self._adapter(spec),
            context_logits=spec.flags.context_logits,
            generation_logits=spec.flags.generation_logits,
            seed_offset=spec.seed_offset,
        )
        return _Unit(
            spec=spec,
            sequence=Sequence(engine, spec.prompt, params),
            reused_blocks=executor.blocks.reusable(spec.prompt, spec.lora_task_id),
            first_scheduled_ns=time.time_ns(),
        )

    def _adapter(self, spec: GenerationSpec) -> Adapter | None:
        if spec.lora_task_id is None:
            return None
        executor = self.executor
        prepared = None
        try:
            if spec.lora_weights is not None and spec.lora_config is not None:
                deltas = unpack_adapter(
                    spec.lora_weights, spec.lora_config, executor.engine.shape, executor.settings.max_lora_rank
                )
                prepared = executor.engine.prepare_adapter(deltas)
            adapter = executor.lora.acquire(spec.lora_task_id, prepared)
        except LoraError as exc:
            raise ExecutorError(str(exc)) from None
        self._lora_tasks.append(spec.lora_task_id)
        return adapter

    # --- generation ---------------------------------------------------------------------------------

    def cancelled(self) -> bool:
        if self.stop_requested:
            return True
        now = time.monotonic()
        if now < self._next_cancel_check:
            return False
        self._next_cancel_check = now + self.executor.settings.cancellation_check_period_ms / 1000
        return self.sink.is_cancelled()

    def advance(self) -> bool:
        for unit in self._units:
            if not unit.done:
                self._step(unit)
        return all(unit.done for unit in self._units)

    def _step(self, unit: _Unit) -> None:
        sequence = unit.sequence
        if not sequence.finished:
            step = sequence.step()
            now = time.time_ns()
            unit.first_token_ns = unit.first_token_ns or now
            unit.last_token_ns = now
            if step.in_output:
                unit.pending.append(step.token)
                unit.pending_logprobs.append(step.logprob)
                if step.logits is not None:
                    unit.pending_logits.append(step.logits.numpy())
        if sequence.finished:
            self._finish(unit)
        elif unit.spec.streaming and len(unit.pending) >= self._chunk(unit):
            self._send(unit, final=False)

    def _chunk(self, unit: _Unit) -> int:
        sizes = self.executor.settings.tokens_per_response
        return sizes[unit.responses_sent % len(sizes)]

    def _finish(self, unit: _Unit) -> None:
        unit.done = True
        spec = unit.spec
        self.executor.blocks.store([*spec.prompt, *unit.sequence.tokens], spec.lora_task_id)
        last = all(other.done for other in self._units)
        if last:
            self._release()
        self._send(unit, final=last)

    def _send(self, unit: _Unit, final: bool) -> None:
        spec, sequence = unit.spec, unit.sequence
        echo = not spec.streaming and not spec.exclude_input
        tokens: Seq[int] = [*spec.prompt, *unit.pending] if echo else list(unit.pending)
        context = sequence.context_logits if unit.responses_sent == 0 and sequence.context_logits is not None else None
        content = ResponseContent(
            tokens=tokens,
            logprobs=list(unit.pending_logprobs),
            cumulative_logprob=sequence.cumulative_logprob,
            context_logits=None if context is None else context.numpy(),
            generation_logits=np.stack(unit.pending_logits) if unit.pending_logits else None,
            perf=self._perf(unit),
        )
        self.executor.metrics.tokens_generated(len(unit.pending))
        unit.pending, unit.pending_logprobs, unit.pending_logits = [], [], []
        unit.responses_sent += 1
        self.sink.send(trtllm_outputs(spec, content), final)

    def _perf(self, unit: _Unit) -> PerfRecord | None:
        if not unit.spec.flags.perf_metrics:
            return None
        length = len(unit.spec.prompt) + len(unit.sequence.tokens)
        return PerfRecord(
            arrival_ns=self.arrival_ns,
            first_scheduled_ns=unit.first_scheduled_ns,
            first_token_ns=unit.first_token_ns,
            last_token_ns=unit.last_token_ns,
            blocks=self.executor.blocks.stats(unit.reused_blocks, length),
        )

    # --- endings ------------------------------------------------------------------------------------

    def cancel(self) -> None:
        generated = sum(len(unit.sequence.tokens) for unit in self._units)
        unsent = sum(len(unit.pending) for unit in self._units)
        self._release()
        self.executor.metrics.tokens_generated(unsent)
        self.executor.metrics.request_cancelled()
        why = "stop request" if self.stop_requested else "Triton cancellation"
        logger.warning(
            "stand-in %s: request %s (Triton id %r) cancelled by %s after %d tokens",
            self.executor.scheduler.name,
            self.request_id,
            self.triton_id,
            why,
            generated,
        )
        self.sink.close()

    def fail(self, message: str) -> None:
        self._release()
        self.sink.send_error(executor_message(self.request_id, message))

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        for task in self._lora_tasks:
            self.executor.lora.release(task)
        self._lora_tasks = []
        self.executor.forget(self)
