"""One thread per model instance that runs every request one token step at a time.

Why a thread, as in the reference model: ``execute`` must return at once (a decoupled model gets
its next request, a ``stop`` for a running request, or a BLS's second call only then), the engine's
active LoRA adapter is global state that no two forwards may share, and in-flight batching means
concurrent requests progress together. So ``execute`` converts and enqueues; this thread admits
work (``start``), then round-robins ``advance`` over everything active, checking each request's
cancellation before its step. Generic: the ``tensorrt_llm``, llmapi and v0.5 stand-ins each bring
their own ``Work``. Pure Python.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger(__name__)

SHUTDOWN_MESSAGE = "the stand-in model is shutting down; the request was not completed"


class Work(Protocol):
    """One Triton request's generation, driven by the scheduler thread only."""

    def start(self) -> bool:
        """Admission (the executor's checks, adapters, guides); False when it already answered."""

    def cancelled(self) -> bool: ...

    def advance(self) -> bool:
        """One token step for each of its sequences, responses sent as due; True once finished."""

    def cancel(self) -> None:
        """Stop now and answer as a cancelled request is answered."""

    def fail(self, message: str) -> None:
        """Stop now and answer with an error."""


class Scheduler:
    def __init__(self, name: str) -> None:
        self.name = name
        self._incoming: queue.Queue[Work | None] = queue.Queue()
        self._active: list[Work] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{name}-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, work: Work) -> None:
        self._incoming.put(work)

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._incoming.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._take(block=not self._active)
            for work in list(self._active):
                self._advance(work)
        for work in [*self._active, *self._drain()]:
            self._safely(work.fail, SHUTDOWN_MESSAGE)

    def _drain(self) -> list[Work]:
        works: list[Work] = []
        while True:
            try:
                work = self._incoming.get_nowait()
            except queue.Empty:
                return works
            if work is not None:
                works.append(work)

    def _take(self, block: bool) -> None:
        arrived = self._drain()
        if block and not arrived:
            work = self._incoming.get()
            arrived = [work] if work is not None else []
            arrived.extend(self._drain())
        for work in arrived:
            if work.cancelled():  # cancelled while queued: never start it
                self._safely(work.cancel)
            elif self._safely(work.start):
                self._active.append(work)

    def _advance(self, work: Work) -> None:
        if work.cancelled():
            self._active.remove(work)
            self._safely(work.cancel)
            return
        try:
            done = work.advance()
        except Exception as exc:  # noqa: BLE001 - an engine failure fails that request, not the thread
            logger.exception("stand-in generation failed")
            self._active.remove(work)
            self._safely(work.fail, str(exc))
            return
        if done:
            self._active.remove(work)

    @staticmethod
    def _safely(action: Callable[..., object], *args: object) -> bool:
        """Run a step that sends; a send that fails (the client is gone) must not kill the thread.
        False when it raised or returned False."""
        try:
            return action(*args) is not False
        except Exception:  # noqa: BLE001
            logger.warning("stand-in could not answer a request; dropping it", exc_info=True)
            return False
