"""One generation placed by the replica pool, and moved to another replica when its own fails.

Placement and the retry before the first token happen in the first step, as they always have.
After it, a stream that cannot move (one replica known, ``migration_limit`` 0, or a request its
contract cannot continue, ``contracts/continuation.py``) hands out the replica's stream's own
step, and costs a token nothing here. A stream that may move takes one step of its own per
batch: it records what was produced (``Produced``), and when the replica fails with an error
that blames the replica rather than the request (it is unreachable, or unavailable: killed,
drained past its grace, its connection lost), it asks the contract for the continuation, places
that on another replica, and goes on with its batches, so the consumer reads one stream. The
pool decides whether to move; the contract knows how.

What the client keeps across a move: the text (no token lost or repeated: the continuation
starts at the next token), the assembler's state above (stop strings, tool-call and reasoning
parsing, logprobs go on from where they were), and one ``usage``: the prompt's count is the
first replica's, whatever the continuation's prompt was, and tokens are counted once.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from gateway.backend.contracts.continuation import Continuation
from gateway.backend.contracts.vllm import VLLM
from gateway.backend.handoff import HandOffStream, Step, step_of
from gateway.backend.types import GenerationChunk, GenerationRequest, GenerationStream, Produced
from gateway.errors import BackendUnavailableError, GatewayError, ShuttingDownError
from gateway.tracing import MIGRATE, ROUTE, current_trace

if TYPE_CHECKING:
    from gateway.backend.replicas.pool import Replica, ReplicaPool

logger = logging.getLogger(__name__)


def moves_on(error: BaseException) -> bool:
    """Whether a mid-stream failure is the replica's: unavailable or unreachable, but not the
    gateway's own shutdown (there is no stream left to go on to)."""
    return isinstance(error, BackendUnavailableError) and not isinstance(error, ShuttingDownError)


class PoolStream(HandOffStream):
    """``ReplicaPool.generate``'s stream of batches; see the module docstring."""

    __slots__ = ("_pool", "_request", "_replica", "_inner", "_error", "_produced", "_moves", "_step_inner", "_fix")

    def __init__(self, pool: ReplicaPool, request: GenerationRequest) -> None:
        super().__init__()
        self._pool = pool
        self._request = request
        self._replica: Replica | None = None
        """Where the generation runs, until it is closed."""
        self._inner: GenerationStream | None = None
        self._error: BaseException | None = None
        self._produced: Produced | None = None
        """What it has generated, while it may move (None: it cannot)."""
        self._moves = 0
        self._step_inner: Step = _no_step
        self._fix: _Fix | None = None
        """Set by a move: how the continuation's chunks are mended into the client's stream."""

    @property
    def error(self) -> BaseException | None:
        if self._error is not None:
            return self._error
        return self._inner.error if self._inner is not None else None

    async def _start(self) -> list[GenerationChunk]:
        pool, request = self._pool, self._request
        if pool.migration_limit > 0 and pool.several:
            contract = request.contract
            migratable = (contract or VLLM).migratable(request)
            if migratable is not None:
                self._request = request = migratable
                self._produced = Produced()
        batch = await self._place(request, set())
        if self._produced is None:
            assert self._inner is not None
            self._hand_off(self._inner.__anext__)
        else:
            self._produced.add(batch)
            self._hand_off(self._step)
        return batch

    async def _place(self, request: GenerationRequest, tried: set[Replica]) -> list[GenerationChunk]:
        """Place ``request`` and read its first batch; once more on another replica if it failed
        before that batch with the backend unavailable."""
        pool = self._pool
        trace = current_trace.get()
        while True:
            choice = pool.router.choose(request.session_key, request.prompt, pool._eligible(request.model, tried))
            if choice is None:
                self._error = BackendUnavailableError(
                    f"no Triton replica serves the model '{request.model}' now", headers={"Retry-After": "1"}
                )
                raise self._error
            replica = self._replica = pool._placed(request, choice)
            if trace is not None:
                trace.event(ROUTE, None, {"gateway.replica": replica.address, "gateway.route": choice.route.value})
            replica.in_flight += 1
            if pool.observer is not None:
                pool.observer.replica_in_flight(replica.address, 1)
            inner = self._inner = replica.backend.generate(request)
            try:
                batch = await inner.__anext__()
            except BackendUnavailableError as exc:
                await self._release(exc)
                tried.add(replica)
                if len(tried) > 1 + self._moves or not pool._eligible(request.model, tried):
                    self._error = exc
                    raise
                logger.info("retrying elsewhere: %s failed before the first token (%s)", replica.address, exc.message)
                if pool.observer is not None:
                    pool.observer.retried(replica.address)
                continue
            self._step_inner = step_of(inner.__anext__)
            return batch

    async def _step(self) -> list[GenerationChunk]:
        """A step of a stream that may move: the replica's batch, recorded; or, when the replica
        failed, the continuation's first batch."""
        try:
            batch = await self._step_inner()
        except BaseException as exc:
            if not moves_on(exc):
                raise
            batch = await self._move(exc)
        else:
            if self._fix is not None:
                batch = self._fix.mend(batch)
        produced = self._produced
        assert produced is not None
        produced.add(batch)
        return batch

    async def _move(self, error: BaseException) -> list[GenerationChunk]:
        """Continue on another replica, or raise ``error`` when the stream cannot go on."""
        pool, produced = self._pool, self._produced
        assert produced is not None
        failed = self._replica
        assert failed is not None  # a step runs only while the stream is placed
        address = failed.address
        started = time.monotonic()
        await self._release(error)
        deadline = self._request.deadline
        continuation: Continuation | None = None
        if self._moves < pool.migration_limit and (deadline is None or started < deadline):
            continuation = (self._request.contract or VLLM).continuation(self._request, produced)
        if continuation is None:
            self._moved(address, "not_continuable", None, produced)
            raise error
        self._moves += 1
        tried = {failed}
        try:
            batch = await self._place(continuation.request, tried)
        except BackendUnavailableError:
            self._moved(address, "failed", None, produced)
            self._error = error
            raise error from None
        except GatewayError:  # the continuation refused (a replayed id the model would not take)
            self._moved(address, "failed", None, produced)
            raise
        self._moved(address, "continued", time.monotonic() - started, produced)
        assert self._replica is not None
        logger.info(
            "stream moved from %s to %s after %d tokens (%s)",
            address,
            self._replica.address,
            produced.tokens,
            getattr(error, "message", error),
        )
        self._fix = _Fix(produced.prompt_tokens, continuation)
        return self._fix.mend(batch)

    def _moved(self, address: str, outcome: str, seconds: float | None, produced: Produced) -> None:
        observer = self._pool.observer
        if observer is not None:
            observer.migrated(address, outcome, seconds)
        trace = current_trace.get()
        if trace is not None:
            attributes = {
                "gateway.replica": address,
                "gateway.outcome": outcome,
                "gateway.tokens": str(produced.tokens),
            }
            trace.event(MIGRATE, None, attributes)

    async def _release(self, error: BaseException | None = None) -> None:
        """Close the replica's stream, free its slot there and tell the pool what the stream's
        failure (``error``, else the one the stream kept) says of the replica; once."""
        replica, inner = self._replica, self._inner
        if replica is None or inner is None:
            return
        self._replica = None
        pool = self._pool
        try:
            await inner.aclose()
        finally:
            replica.in_flight -= 1
            if pool.observer is not None:
                pool.observer.replica_in_flight(replica.address, -1)
            pool._failed(replica, self._request.model, error if error is not None else inner.error)

    async def aclose(self) -> None:
        self._stop()
        await self._release()


class _Fix:
    """How a continuation's chunks join the client's stream: the prompt's count as the first
    replica said it (a text or tokens continuation's prompt holds the generated part too), and
    the bytes the client already has skipped (a character the failure cut)."""

    __slots__ = ("prompt_tokens", "_skip")

    def __init__(self, prompt_tokens: int | None, continuation: Continuation) -> None:
        self.prompt_tokens = prompt_tokens
        self._skip = continuation.skip_bytes

    def mend(self, batch: list[GenerationChunk]) -> list[GenerationChunk]:
        mended = []
        for chunk in batch:
            if self._skip and chunk.text:
                text = chunk.text[0]
                dropped = min(self._skip, len(text))
                self._skip -= dropped
                chunk = chunk._replace(text=(text[dropped:], *chunk.text[1:]))
            if chunk.num_input_tokens not in (None, self.prompt_tokens) and self.prompt_tokens is not None:
                chunk = chunk._replace(num_input_tokens=self.prompt_tokens)
            mended.append(chunk)
        return mended


async def _no_step() -> list[GenerationChunk]:
    raise StopAsyncIteration
