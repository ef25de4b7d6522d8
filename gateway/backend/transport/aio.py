"""Streaming gRPC calls on ``grpc.aio``: the conservative fallback to ``h2.H2Transport``.

Why keep it: grpc.aio is gRPC's own client, so it gets everything right that our HTTP/2 code
might not with an unusual peer (a proxy or service mesh in front of Triton, odd framing, a new
HTTP/2 extension), and it shares the backend's channel: one connection, one keepalive policy, one
trust store for control calls and token streams. What it costs: every message crosses from a gRPC
core thread to the event loop (docs/PERFORMANCE.md), so a token costs more CPU than on h2.

A call is a unary-stream call on the wire: one request message, then the client half-closes,
exactly what a bidi ``ModelStreamInfer`` call with a one-message request iterator sends, minus the
task grpc.aio runs to drain such an iterator. A reader task per call takes messages off the call as
they arrive and parses them, so the consumer gets everything that arrived since it last asked (the
batches the SSE writer coalesces). Cancelling the grpc.aio call sends ``RST_STREAM(CANCEL)``, which
Triton turns into ``is_cancelled()`` for the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from gateway.backend.transport.base import CANCELLED, INTERNAL, UNAVAILABLE, BatchedCall, CallError, Metadata

T = TypeVar("T")

ChannelSource = Callable[[], "grpc.aio.Channel | None"]
"""Gives the channel to open calls on (the backend's, created when it starts), or None if there is
none yet: read per call, so the transport can be built before the event loop runs."""


def _call_error(error: grpc.aio.AioRpcError) -> CallError:
    code = error.code()
    return CallError(code.value[0], error.details() or code.name)


class AioStreamCall(BatchedCall[T]):
    """One call's parsed messages, handed out in batches: everything the reader task took off the
    call since the consumer last asked."""

    __slots__ = ("_call", "_parse", "_task")

    def __init__(self, call: grpc.aio.UnaryStreamCall, parse: Callable[[bytes], T]) -> None:
        super().__init__()
        self._call = call
        self._parse = parse
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        """Runs until the call ends; never raises, so no task is left with an unread exception."""
        call, parse = self._call, self._parse
        try:
            while True:
                message = await call.read()
                if message is grpc.aio.EOF:
                    break
                if self._done:
                    return
                try:
                    item = parse(message)
                except Exception as exc:  # noqa: BLE001 - a parse failure or an in-stream error ends this call only
                    self._finish(exc)
                    call.cancel()
                    return
                self._items.append(item)  # not cached: the consumer swaps the list for each batch
                self._wake()
        except grpc.aio.AioRpcError as exc:
            self._finish(_call_error(exc))
        except asyncio.CancelledError:
            # Our cancel() or abort(), or the channel closing under the call.
            self._finish(CallError(CANCELLED, "the call was cancelled"))
        except Exception as exc:  # noqa: BLE001 - grpc.aio's own failures (e.g. a usage error) end the call
            self._finish(CallError(INTERNAL, f"the gRPC call failed: {exc!r}"))
        else:
            self._finish(None)

    @property
    def reader(self) -> asyncio.Task[None]:
        return self._task

    # -- the consumer's side ------------------------------------------------------------------

    def abort(self, error: BaseException) -> None:
        """End the call now with ``error`` for the consumer (deadline, shutdown) and tell Triton."""
        if not self._done:
            self._items.clear()
            self._finish(error)
        self._stop()

    def cancel(self) -> None:
        """Stop the call (the consumer left or has what it needs); nothing more is delivered."""
        self._done = True
        self._items.clear()
        self._wake()
        self._stop()

    def _stop(self) -> None:
        self._call.cancel()
        self._task.cancel()


class AioTransport:
    """The ``StreamTransport`` on a ``grpc.aio`` channel it does not own (the backend closes it)."""

    def __init__(self, channel: ChannelSource) -> None:
        self._channel_source = channel
        self._channel: grpc.aio.Channel | None = None
        self._methods: dict[bytes, Any] = {}
        self._calls: set[AioStreamCall[Any]] = set()
        """Open calls: they keep their reader tasks referenced until the call ends."""

    def _method(self, path: bytes) -> Any:
        channel = self._channel_source()
        if channel is None:
            raise CallError(UNAVAILABLE, "the gRPC channel to the server is not open")
        if channel is not self._channel:  # the backend restarted: methods belong to their channel
            self._channel = channel
            self._methods = {}
        method = self._methods.get(path)
        if method is None:
            # No serializers: messages are bytes both ways (the backend builds and parses them).
            method = self._methods[path] = self._channel.unary_stream(path.decode())
        return method

    async def open(
        self,
        path: bytes,
        message: bytes,
        parse: Callable[[bytes], T],
        deadline: float | None = None,
        metadata: Metadata = (),
    ) -> AioStreamCall[T]:
        """Start the call. Unlike h2, an unreachable server shows on the first read (grpc.aio
        connects in the background): the consumer gets the same ``CallError(UNAVAILABLE)``. Opening
        never waits, so ``deadline`` is left to the backend's timer, which covers the whole call."""
        method = self._method(path)
        if metadata:
            grpc_call = method(message, metadata=[(name.decode(), value.decode()) for name, value in metadata])
        else:
            grpc_call = method(message)
        call: AioStreamCall[T] = AioStreamCall(grpc_call, parse)
        self._calls.add(call)
        call.reader.add_done_callback(lambda _: self._calls.discard(call))
        return call

    def reachable(self) -> None:
        """Nothing to forget: grpc.aio's channel manages its own reconnect backoff."""

    async def close(self) -> None:
        """Fail the open calls (as h2 does when its connection closes) and wait for their readers."""
        calls = list(self._calls)
        for call in calls:
            call.abort(CallError(UNAVAILABLE, "the gateway is closing its connection to the server"))
        readers = [call.reader for call in calls]
        if readers:
            await asyncio.gather(*readers, return_exceptions=True)
