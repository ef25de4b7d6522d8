"""SSE transport: the streaming response, keep-alive pings, and priming for early errors.

Framing of each event is done by ``responses.ChunkEncoder`` (bytes in the hot path); this module
hands those bytes to ``sse-starlette``, which owns the concerns every SSE endpoint has: watching
for the client's disconnect (then cancelling our generator, whose ``finally`` cancels the Triton
call), pinging while idle, and honouring server shutdown. Pings are bare comment lines
(``: ping``): never ``id:`` or ``retry:`` fields, which break some openai-python versions.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Message, Send


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping", sep="\n")


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
    done, _ = await asyncio.wait({task}, timeout=wait)
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


class _EventSourceResponse(EventSourceResponse):
    """sse-starlette's response without a cancel scope per frame when no send timeout is set: the
    scope's enter/exit was a visible share of the per-token cost in the profile."""

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        if self.send_timeout is None:
            await send(message)
        else:
            await super()._send_with_timeout(send, message)


def sse_response(
    frames: AsyncIterator[bytes], *, ping_interval: float, headers: Mapping[str, str] | None = None
) -> EventSourceResponse:
    return _EventSourceResponse(
        frames,
        ping=ping_interval,
        ping_message_factory=_ping,
        sep="\n",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})},
    )
