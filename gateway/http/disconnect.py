"""Noticing that the client left, with one task per request.

Until its answer is ready, nothing is written to a client's socket. That covers the time in the
queue, priming and a whole non-streaming generation. A client that leaves then would go
unnoticed, and Triton would keep working for nobody. ``ClientWatch`` waits on ``receive`` for
``http.disconnect``. When it comes, it cancels the request's own task, wherever that task is
waiting: in the queue, for the first step, in the generation, or while a frame is written.

One watch serves the whole request, so no phase needs a task of its own beside a watcher of its
own. ``http.answer.respond`` starts it before the request first waits (in the queue, or for the
first step, whose task it starts just before) and hands it to the SSE response, which keeps it
until the stream ends. The SSE response writes the body from a task of its own, which the
request's task waits for: cancelling the request's task (this watch's job) cancels that one too.
"""

from __future__ import annotations

import asyncio

from starlette.types import Receive


class ClientWatch:
    """Cancels the task that created it when the client disconnects.

    The task must treat a ``CancelledError`` for which ``taken_back()`` is true as the client
    leaving. ``stop`` ends the watch; call it before the answer is written or abandoned.
    """

    __slots__ = ("task", "gone", "_watcher", "_withdrawn")

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.gone = False
        """Whether the client disconnected (and the task was cancelled for it)."""
        self._withdrawn = False
        self._watcher: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        self.task.cancel()

    def stop(self) -> None:
        watcher = self._watcher
        if watcher is not None:
            self._watcher = None
            watcher.cancel()

    def taken_back(self) -> bool:
        """After a ``CancelledError`` in the task: whether this watch caused it. If so, the
        cancellation is withdrawn, so the task can finish its cleanup and end normally."""
        if not self.gone:
            return False
        if not self._withdrawn and hasattr(self.task, "uncancel"):  # Python 3.11+
            self._withdrawn = True
            self.task.uncancel()
        return True
