"""The seam between the Triton client and the bytes: what a streaming gRPC transport offers.

``TritonBackend`` builds request messages and parses response messages (the tensor contracts);
a transport only moves them. Two implement this protocol: ``h2.H2Transport`` (our own HTTP/2
connection read by the event loop: the fast one) and ``aio.AioTransport`` (``grpc.aio``: the
conservative fallback). Both speak gRPC status codes through ``CallError``, so the backend maps
failures to typed errors in one place whatever carries the call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
_Self = TypeVar("_Self", bound="BatchedCall[Any]")

# gRPC status codes (https://grpc.github.io/grpc/core/md_doc_statuscodes.html) the backend maps.
OK, CANCELLED, UNKNOWN, DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE = 0, 1, 2, 4, 13, 14
PERMISSION_DENIED, RESOURCE_EXHAUSTED, UNIMPLEMENTED, UNAUTHENTICATED = 7, 8, 12, 16

STREAM_INFER_PATH = b"/inference.GRPCInferenceService/ModelStreamInfer"

Metadata = tuple[tuple[bytes, bytes], ...]
"""A call's own gRPC metadata (lower-case ASCII names and values): the trace context
(``traceparent``) when the request is traced, else empty."""


class CallError(Exception):
    """A call ended with a non-OK gRPC status, or the connection under it failed.

    ``retryable`` is set only when the server provably never started the call (it refused the
    stream, or its GOAWAY excluded it, or the request never fully left the client): sending it
    again cannot run the generation twice."""

    def __init__(self, code: int, details: str, *, retryable: bool = False) -> None:
        super().__init__(f"gRPC status {code}: {details}")
        self.code = code
        self.details = details
        self.retryable = retryable


class BatchedCall(Generic[T]):
    """What both transports' calls share: parsed messages wait in a list until the consumer asks,
    and it takes them all at once. A client that reads slower than Triton produces so gets fewer,
    larger batches instead of a queue of tiny ones (the coalescing the SSE writer relies on).
    The transport side appends to ``_items`` and calls ``_wake``, then ``_finish`` once."""

    __slots__ = ("_items", "_waiter", "_error", "_done", "_loop", "map_error")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        """Kept: Python 3.11's ``get_running_loop`` makes a ``getpid`` system call (its fork check),
        which asking for it per batch would add to every token."""
        self._items: list[T] = []
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._done = False
        self.map_error: Callable[[BaseException], BaseException] | None = None
        """Turns the error the call ends with into the one its consumer gets (the backend's typed
        errors): the backend can then hand its consumer this call's ``__anext__`` itself, with no
        step of its own around it on every token."""

    def _finish(self, error: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _taken(self) -> None:
        """The consumer took a batch (the h2 call gives the stream's flow-control window back)."""

    def __aiter__(self: _Self) -> _Self:
        return self

    async def __anext__(self) -> list[T]:
        while True:
            items = self._items
            if items:
                self._items = []
                self._taken()
                return items
            if self._done:
                error = self._error
                if error is not None:
                    self._error = None
                    map_error = self.map_error
                    raise error if map_error is None else map_error(error)
                raise StopAsyncIteration
            waiter = self._waiter = self._loop.create_future()
            await waiter


class StreamCall(Protocol[T]):
    """One server-streaming call: an async iterator of *batches* of parsed messages (everything
    that arrived since the consumer last asked), ending after the server's trailers. A non-OK
    status raises ``CallError`` (or the error ``parse`` raised) after the messages before it."""

    map_error: Callable[[BaseException], BaseException] | None
    """Applied to the error the call ends with before its consumer gets it (see ``BatchedCall``)."""

    def __aiter__(self) -> StreamCall[T]: ...

    async def __anext__(self) -> list[T]: ...

    def abort(self, error: BaseException) -> None:
        """End the call now: the consumer gets ``error``, the server a cancellation."""

    def cancel(self) -> None:
        """Stop the call: nothing more is delivered, the server gets a cancellation."""


class StreamTransport(Protocol):
    """Opens streaming calls to one server."""

    async def open(
        self,
        path: bytes,
        message: bytes,
        parse: Callable[[bytes], T],
        deadline: float | None = None,
        metadata: Metadata = (),
    ) -> StreamCall[T]:
        """Start a call with its one request message, half-closed after it, sending ``metadata``
        with its headers. Raises ``CallError``
        (UNAVAILABLE) when the server cannot be reached, DEADLINE_EXCEEDED when ``deadline`` (a
        ``time.monotonic()`` value) passes while connecting or waiting for a stream slot."""
        ...

    def reachable(self) -> None:
        """The server just answered on another channel (the backend's readiness check): a transport
        that remembers a failed connection attempt forgets it, so ready means requests go through."""

    async def close(self) -> None: ...
