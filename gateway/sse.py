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


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping", sep="\n")


async def _resume(first: bytes, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        yield first
        async for frame in frames:
            yield frame
    finally:
        await frames.aclose()  # type: ignore[attr-defined]


async def _await_then_resume(
    first: asyncio.Task[bytes], frames: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    try:
        try:
            yield await first
        except StopAsyncIteration:
            return
        async for frame in frames:
            yield frame
    finally:
        first.cancel()
        await frames.aclose()  # type: ignore[attr-defined]


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
        return _await_then_resume(task, frames)
    try:
        first = task.result()
    except StopAsyncIteration:
        first = b""
    except BaseException:
        await frames.aclose()  # type: ignore[attr-defined]
        raise
    return _resume(first, frames)


def sse_response(
    frames: AsyncIterator[bytes], *, ping_interval: float, headers: Mapping[str, str] | None = None
) -> EventSourceResponse:
    return EventSourceResponse(
        frames,
        ping=ping_interval,
        ping_message_factory=_ping,
        sep="\n",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})},
    )
