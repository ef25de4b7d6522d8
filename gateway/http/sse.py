"""SSE transport: the streaming response, keep-alive pings, and priming for early errors.

Framing of each event is done by ``responses.ChunkEncoder`` (bytes in the hot path); this module
writes those bytes, watches for the client's disconnect (then cancels the stream, whose
``finally`` cancels the Triton call) and pings while idle. Pings are bare comment lines
(``: ping``): never ``id:`` or ``retry:`` fields, which break some openai-python versions. Server
shutdown is the drain in ``server.py``. (sse-starlette did this job first; it spends a task group,
four tasks and a cancel scope per frame on concerns these streams do not have: see
docs/DEPENDENCIES.md for the numbers that retired it.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class _Primed:
    """The first frame, then the rest of ``frames``: a plain iterator object rather than another
    async generator layer, since every frame of the stream passes through it."""

    __slots__ = ("_first", "_frames")

    def __init__(self, first: bytes | asyncio.Task[bytes], frames: AsyncIterator[bytes]) -> None:
        self._first: bytes | asyncio.Task[bytes] | None = first
        self._frames = frames

    def __aiter__(self) -> _Primed:
        return self

    async def __anext__(self) -> bytes:
        first = self._first
        if first is None:
            return await self._frames.__anext__()
        self._first = None
        if isinstance(first, bytes):
            return first
        return await first  # StopAsyncIteration ends the stream

    async def aclose(self) -> None:
        first = self._first
        if isinstance(first, asyncio.Task):
            first.cancel()
        self._first = None
        await self._frames.aclose()  # type: ignore[attr-defined]


async def prime(frames: AsyncIterator[bytes], wait: float) -> AsyncIterator[bytes]:
    """Wait up to ``wait`` seconds for the first frame before any header is sent.

    An error that comes that early (Triton down, a model refusing the request) then raises here
    and gets a real status code instead of a 200 stream with an error event; a slow first token
    (a long prefill) does not hold the headers back longer than ``wait``, so pings start flowing.
    """

    async def first_frame() -> bytes:
        return await anext(frames)

    task = asyncio.ensure_future(first_frame())
    try:
        done, _ = await asyncio.wait({task}, timeout=wait)
    except asyncio.CancelledError:  # the client left while we waited: stop the generation now
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
        raise
    if not done:
        return _Primed(task, frames)
    try:
        first = task.result()
    except StopAsyncIteration:
        first = b""
    except BaseException:
        await frames.aclose()  # type: ignore[attr-defined]
        raise
    return _Primed(first, frames)


PING_FRAME = b": ping\n\n"
BODY_SEND = "body_send"
"""``scope["state"]`` key of the outer ``send`` to write body frames with (see
``app.RequestIdMiddleware``); without it, frames go through the ``send`` the response was given."""


class SSEResponse(Response):
    """A streaming ``text/event-stream`` response for frames that are already SSE-encoded.

    One extra task per stream waits on ``receive`` and cancels the stream the moment the client
    disconnects (the stream's ``finally`` then cancels the Triton call); a timer sends a
    ``: ping`` comment whenever nothing was written for ``ping_interval`` seconds. The frames are
    written with one ``send`` each and nothing else per frame: no task group, no cancel scope, no
    re-encoding. Idle streams cost memory, so the per-stream state is kept to that.
    """

    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterator[bytes], ping_interval: float, headers: Mapping[str, str]) -> None:
        self.frames = frames
        self.ping_interval = ping_interval
        self.status_code = 200
        self.background = None
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream_task = asyncio.current_task()
        assert stream_task is not None
        loop = asyncio.get_running_loop()
        last_write = loop.time()
        client_gone = False
        pings: set[asyncio.Task[None]] = set()

        async def watch() -> None:
            nonlocal client_gone
            while (await receive())["type"] != "http.disconnect":
                pass
            client_gone = True
            stream_task.cancel()

        async def ping() -> None:
            try:
                await send({"type": "http.response.body", "body": PING_FRAME, "more_body": True})
            except OSError:  # the client is gone; the watcher ends the stream
                pass

        def ping_if_idle() -> None:
            nonlocal last_write, timer
            idle = loop.time() - last_write
            if idle >= self.ping_interval:
                last_write = loop.time()
                task = loop.create_task(ping())
                pings.add(task)
                task.add_done_callback(pings.discard)
                idle = 0.0
            timer = loop.call_later(self.ping_interval - idle, ping_if_idle)

        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        send = scope.get("state", {}).get(BODY_SEND, send)
        watcher = loop.create_task(watch())
        timer = loop.call_later(self.ping_interval, ping_if_idle)
        try:
            async for frame in self.frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
                last_write = loop.time()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not client_gone:
                raise
            if hasattr(stream_task, "uncancel"):  # Python 3.11+
                stream_task.uncancel()  # our own cancel: the client left, the stream is over
        finally:
            timer.cancel()
            watcher.cancel()
            await self.frames.aclose()  # type: ignore[attr-defined]


def sse_response(
    frames: AsyncIterator[bytes], *, ping_interval: float, headers: Mapping[str, str] | None = None
) -> SSEResponse:
    return SSEResponse(
        frames,
        ping_interval,
        {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            "x-accel-buffering": "no",
            "connection": "keep-alive",
            **(headers or {}),
        },
    )
