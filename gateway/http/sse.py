"""SSE on the wire: the event framing, and the streaming response that writes the frames.

Every SSE byte the gateway sends is framed here: ``data: <json>\n\n`` events (the OpenAI chunks
are encoded into ``DATA_FRAMING`` directly, see ``openai.encode.ChunkEncoder``), named
``event: <type>`` events (the Responses API's, ``event_framing``), ``data: [DONE]``, and pings.
Pings are bare comment lines (``: ping``): never ``id:`` or ``retry:`` fields, which break some
openai-python versions. ``SSEResponse`` writes the frames, watches for the client's
disconnect (then cancels the stream, whose ``aclose`` cancels the Triton call) and pings while
idle. Server shutdown is the drain in ``server.py``. (sse-starlette did this job first; it spends
a task group, four tasks and a cancel scope per frame on concerns these streams do not have: see
docs/DEPENDENCIES.md for the numbers that retired it.)
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Protocol

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.http.disconnect import ClientWatch

DATA_FRAMING = (b"data: ", b"\n\n")
"""An SSE ``data`` event's prefix and suffix: the payload is one line of JSON (no newlines)."""
DONE_FRAME = b"data: [DONE]\n\n"
"""OpenAI's end of stream; never sent after an error event."""
PING_FRAME = b": ping\n\n"


@functools.lru_cache(maxsize=64)
def event_framing(event: str) -> tuple[bytes, bytes]:
    """A named event's prefix and suffix (``event: <type>`` then its ``data`` line), as the
    Responses API frames its events: clients may dispatch on the name or on the JSON's ``type``."""
    return b"event: " + event.encode() + b"\ndata: ", DATA_FRAMING[1]


def data_frame(payload: bytes) -> bytes:
    """One SSE ``data`` event around a one-line payload."""
    return DATA_FRAMING[0] + payload + DATA_FRAMING[1]


class Frames(Protocol):
    """The SSE frames of one stream; ``aclose`` stops whatever produces them. ``ended`` is true
    once the frame just returned is the stream's last (``[DONE]``, or an error event), so the
    response can end its body with it instead of with an empty write after it."""

    @property
    def ended(self) -> bool: ...

    def __aiter__(self) -> Frames: ...

    async def __anext__(self) -> bytes: ...

    async def aclose(self) -> None: ...


class SSEResponse(Response):
    """A streaming ``text/event-stream`` response for frames that are already SSE-encoded.

    The request's ``ClientWatch`` (``http.answer.respond``'s, else one of its own) cancels the
    stream the moment the client disconnects (closing the frames then cancels the Triton call); a
    timer sends a ``: ping`` comment whenever nothing was written for ``ping_interval`` seconds.
    The frames are written with one ``send`` each and nothing else per frame: no task group, no
    cancel scope, no re-encoding. That ``send`` is the one the middlewares handed down, so one
    that wraps it (compression, tracing) sees every frame. Idle streams cost memory, so the
    per-stream state is kept to that.

    ``coalesce_interval``: when a frame was written less than that long after it was asked for
    (the stream is fast), the next one is asked for only once the interval has passed, so whatever
    the backend sent meanwhile waits in the call and comes out as one frame batch, one write. A
    stream whose frames take longer than that to come never waits.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        frames: Frames,
        ping_interval: float,
        raw_headers: list[tuple[bytes, bytes]],
        watch: ClientWatch | None = None,
        coalesce_interval: float = 0.0,
    ) -> None:
        self.frames = frames
        self.ping_interval = ping_interval
        self.coalesce_interval = coalesce_interval
        self.status_code = 200
        self.background = None
        self.raw_headers = raw_headers
        self.watch = watch
        """The request's watch, when ``http.answer.respond`` started one (else the response starts one)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        watch = self.watch
        if watch is None or watch.task is not asyncio.current_task():
            if watch is not None:
                watch.stop()
            watch = ClientWatch(receive)
        pings = _Pings(loop, send, self.ping_interval)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            # The body is written by a task of its own. The request's task waits in every
            # middleware's ``await``, a dozen coroutines deep, and a task resumes each coroutine of
            # its chain each time it wakes: here that happens once per frame, with only this
            # loop's few coroutines to resume. A cancellation of the request's task (the watch's,
            # the server's) cancels the task it waits for, so the writing stops first and the
            # ``finally`` below runs after it.
            await loop.create_task(self._write_body(send, loop, pings))
        except asyncio.CancelledError:
            if not watch.taken_back():  # else our own cancel: the client left, the stream is over
                raise
        finally:
            pings.cancel()
            watch.stop()
            await self.frames.aclose()

    async def _write_body(self, send: Send, loop: asyncio.AbstractEventLoop, pings: _Pings) -> None:
        """Every frame, one ``send`` each (the last one ends the body); a fast stream's next
        frame asked for only once ``coalesce_interval`` has passed."""
        coalesce = self.coalesce_interval
        asked = pings.last_write
        frames = self.frames
        async for frame in frames:
            if frames.ended:  # the body ends with this frame: one write, not two
                await send({"type": "http.response.body", "body": frame, "more_body": False})
                return
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            pings.last_write = now = loop.time()
            if now - asked < coalesce:  # the frame was there at once: the stream is fast
                await asyncio.sleep(coalesce)
                asked = loop.time()
            else:
                asked = now
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Pings:
    """One stream's idle timer: a ``: ping`` whenever nothing was written for ``interval``
    seconds. The writer sets ``last_write`` per frame (an attribute store, no call); the timer
    reads it only when it fires."""

    __slots__ = ("_interval", "_loop", "_send", "_tasks", "_timer", "last_write")

    def __init__(self, loop: asyncio.AbstractEventLoop, send: Send, interval: float) -> None:
        self._loop = loop
        self._send = send
        self._interval = interval
        self._tasks: set[asyncio.Task[None]] = set()
        self.last_write = loop.time()
        self._timer = loop.call_later(interval, self._ping_if_idle)

    def cancel(self) -> None:
        self._timer.cancel()

    def _ping_if_idle(self) -> None:
        loop = self._loop
        idle = loop.time() - self.last_write
        if idle >= self._interval:
            self.last_write = loop.time()
            task = loop.create_task(self._ping())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            idle = 0.0
        self._timer = loop.call_later(self._interval - idle, self._ping_if_idle)

    async def _ping(self) -> None:
        try:
            await self._send({"type": "http.response.body", "body": PING_FRAME, "more_body": True})
        except OSError:  # the client is gone; the watcher ends the stream
            pass


_SSE_HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"connection", b"keep-alive"),
)
"""Every stream's headers, encoded once."""
_SSE_NAMES = frozenset(name for name, _ in _SSE_HEADERS)


def sse_response(
    frames: Frames,
    *,
    ping_interval: float,
    coalesce_interval: float = 0.0,
    headers: Mapping[str, str] | None = None,
    watch: ClientWatch | None = None,
) -> SSEResponse:
    """The response for ``frames``, with the stream's headers and ``headers`` after them (a lowercase
    name replaces the stream's own)."""
    if not headers:
        return SSEResponse(frames, ping_interval, list(_SSE_HEADERS), watch, coalesce_interval)
    extra = encode_headers(headers)
    if _SSE_NAMES.isdisjoint([name for name, _ in extra]):  # the usual case: the replica's headers
        return SSEResponse(frames, ping_interval, [*_SSE_HEADERS, *extra], watch, coalesce_interval)
    merged = {name.decode(): value.decode() for name, value in _SSE_HEADERS} | dict(headers)
    return SSEResponse(frames, ping_interval, encode_headers(merged), watch, coalesce_interval)


def encode_headers(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
