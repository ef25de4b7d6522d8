"""Streaming gRPC calls over one HTTP/2 connection that the event loop reads itself.

Why not ``grpc.aio`` for the token stream: it receives every message on a gRPC core thread, hands
it to a poller thread, which wakes the event loop through a socket pair. strace on the gateway
under load counted 2.6 futex calls, a pipe write and a pipe read per token, and the whole relay cost
about 50-60 µs of CPU per message before any HTTP work (docs/PERFORMANCE.md). Here the loop reads
the socket: one ``data_received`` carries every frame that arrived, the h2 library keeps HTTP/2's
state (HPACK, flow control, settings, resets, GOAWAY), and each gRPC message is parsed and queued
for its call in place, with no thread and no task. Unary control calls (readiness, the repository
index) stay on ``grpc.aio``: they are not on the hot path.

The calls are half-closed after their one request message, so a response stream ends with the
server's trailers. Cancelling a call sends ``RST_STREAM(CANCEL)``, which Triton turns into
``is_cancelled()`` for the model. Knows nothing of Triton's tensors or of OpenAI: messages are
handed to a ``parse`` function given per call.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import urllib.parse
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from gateway.backend.transport.base import (
    CANCELLED,
    INTERNAL,
    OK,
    UNAVAILABLE,
    UNKNOWN,
    CallError,
)

T = TypeVar("T")

_END_STREAM, _PADDED = 0x1, 0x8

_LAST_STREAM_ID = 2**31 - 1 - 2 * 65536
"""Retire a connection well before HTTP/2's stream ids run out (after ~1e9 calls)."""

_WINDOW = 16 * 1024 * 1024
"""Receive window per call and for the connection: large enough that Triton never waits for us
(a generation's whole output fits); data is acknowledged as it is parsed, not as it is consumed,
so a slow HTTP client never stalls the shared connection."""


class StreamCall(Generic[T]):
    """One call's parsed messages, handed out in batches: everything that arrived since the
    consumer last asked. A client that reads slower than Triton produces so gets fewer, larger
    batches instead of a queue of tiny ones (the coalescing the SSE writer relies on)."""

    __slots__ = (
        "stream_id",
        "_connection",
        "_parse",
        "_items",
        "_waiter",
        "_buffer",
        "_status",
        "_error",
        "_done",
        "_unacked",
    )

    def __init__(self, connection: GrpcConnection, parse: Callable[[bytes], T]) -> None:
        self.stream_id = 0
        self._connection = connection
        self._parse = parse
        self._items: list[T] = []
        self._waiter: asyncio.Future[None] | None = None
        self._buffer = b""
        self._status: int | None = None
        self._error: BaseException | None = None
        self._done = False
        self._unacked = 0

    # -- the connection's side ----------------------------------------------------------------

    def _data(self, data: bytes) -> None:
        if self._done:
            return
        if self._buffer:
            data = self._buffer + data
        end, size = 0, len(data)
        try:
            while size - end >= 5:
                length = int.from_bytes(data[end + 1 : end + 5], "big")
                start = end + 5
                if size < start + length:
                    break
                if data[end]:
                    raise CallError(INTERNAL, "compressed gRPC message, but no compression was negotiated")
                end = start + length
                self._items.append(self._parse(data[start:end]))
        except Exception as exc:  # noqa: BLE001 - a parse failure or an in-stream error ends this call only
            self._buffer = b""
            self._finish(exc)
            self._connection.cancel(self)
            return
        self._buffer = data[end:] if end < size else b""
        self._wake()

    def _headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Response headers, trailers, or a trailers-only response: look for the gRPC status."""
        status: int | None = None
        message = ""
        for name, value in headers:
            if name == b"grpc-status":
                status = int(value) if value.isdigit() else UNKNOWN
            elif name == b"grpc-message":
                message = urllib.parse.unquote(value.decode("utf-8", "replace"))
            elif name == b":status" and value != b"200":
                status = UNAVAILABLE if value in (b"502", b"503", b"504") else UNKNOWN
                message = message or f"HTTP status {value.decode('latin-1')} from the server"
        if status is None:
            return
        self._status = status
        if status != OK and self._error is None:
            self._error = CallError(status, message or f"gRPC status {status}")

    def _ended(self) -> None:
        if self._status is None:
            self._finish(CallError(INTERNAL, "the stream ended without a gRPC status"))
        else:
            self._finish(self._error)

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

    # -- the consumer's side ------------------------------------------------------------------

    def abort(self, error: BaseException) -> None:
        """End the call now with ``error`` for the consumer (deadline, shutdown) and tell Triton."""
        if not self._done:
            self._items.clear()
            self._finish(error)
        self._connection.cancel(self)

    def cancel(self) -> None:
        """Stop the call (the consumer left or has what it needs); nothing more is delivered."""
        self._done = True
        self._items.clear()
        self._connection.cancel(self)

    def __aiter__(self) -> StreamCall[T]:
        return self

    async def __anext__(self) -> list[T]:
        while True:
            items = self._items
            if items:
                self._items = []
                return items
            if self._done:
                if self._error is not None:
                    error, self._error = self._error, None
                    raise error
                raise StopAsyncIteration
            waiter = self._waiter = self._connection.loop.create_future()
            await waiter


class GrpcConnection(asyncio.Protocol):
    """One HTTP/2 connection to a gRPC server, carrying any number of ``StreamCall`` s."""

    def __init__(self, authority: str, scheme: str, keepalive: float | None) -> None:
        self.loop = asyncio.get_running_loop()
        self._authority = authority.encode()
        self._scheme = scheme.encode()
        self._h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=True,
                header_encoding=None,
                # Our own headers are fixed and valid; Triton's are read for two names. h2's
                # checks cost ~16 µs per call.
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
                validate_inbound_headers=False,
                normalize_inbound_headers=False,
            )
        )
        self._transport: asyncio.Transport | None = None
        self._inbuf = b""
        self._unacked = 0
        self._calls: dict[int, StreamCall[Any]] = {}
        self._unsent: dict[int, bytes] = {}
        """Request bytes waiting for send window (a prompt larger than Triton's window)."""
        self._slots: deque[asyncio.Future[None]] = deque()
        """Callers waiting for the server's concurrent-stream limit to allow another call."""
        self._keepalive = keepalive
        self._ping_timer: asyncio.TimerHandle | None = None
        self._ping_unanswered = False
        self.closed = False
        self.going_away = False

    @property
    def usable(self) -> bool:
        return not self.closed and not self.going_away

    @property
    def calls(self) -> int:
        return len(self._calls)

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._h2.initiate_connection()
        self._h2.update_settings(
            {
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _WINDOW,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            }
        )
        self._h2.increment_flow_control_window(_WINDOW)
        self._flush()
        if self._keepalive:
            self._ping_timer = self.loop.call_later(self._keepalive, self._ping)

    def data_received(self, data: bytes) -> None:
        """Split the bytes into HTTP/2 frames. DATA frames (one per token) are handed to their
        call here; every other frame goes to h2, in order. h2 never sees the DATA frames, so its
        receive windows stay full and the windows Triton sees are kept open by ``_consumed``."""
        if self._inbuf:
            data = self._inbuf + data
        size, pos = len(data), 0
        calls = self._calls
        while size - pos >= 9:
            length = int.from_bytes(data[pos : pos + 3], "big")
            end = pos + 9 + length
            if end > size:
                break
            flags = data[pos + 4]
            if data[pos + 3] == 0 and not flags & _END_STREAM:
                sid = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                start = pos + 9
                call = calls.get(sid)
                if flags & _PADDED:
                    payload = data[start + 1 : end - data[start]]
                else:
                    payload = data[start:end]
                self._consumed(call, sid, length)
                if call is not None and payload:
                    call._data(payload)
            elif not self._control(data[pos:end]):
                return
            pos = end
        self._inbuf = data[pos:] if pos < size else b""
        self._flush()

    def _control(self, frame: bytes) -> bool:
        """One non-DATA frame (or a DATA frame ending its stream) through h2. False when the
        connection is unusable after it."""
        try:
            events = self._h2.receive_data(frame)
        except h2.exceptions.ProtocolError as exc:
            self._fail_all(CallError(UNAVAILABLE, f"HTTP/2 protocol error from the server: {exc}"))
            if self._transport is not None:
                self._transport.abort()
            return False
        calls = self._calls
        for event in events:
            kind = type(event)
            if kind is h2.events.ResponseReceived or kind is h2.events.TrailersReceived:
                call = calls.get(event.stream_id)
                if call is not None:
                    call._headers(event.headers)
            elif kind is h2.events.DataReceived:  # only a DATA frame with END_STREAM comes here
                call = calls.get(event.stream_id)
                self._consumed(call, event.stream_id, event.flow_controlled_length)
                if call is not None and event.data:
                    call._data(event.data)
            elif kind is h2.events.StreamEnded:
                call = calls.pop(event.stream_id, None)
                if call is not None:
                    call._ended()
                    self._release_slot()
            elif kind is h2.events.StreamReset:
                call = calls.pop(event.stream_id, None)
                self._unsent.pop(event.stream_id, None)
                if call is not None:
                    code = UNAVAILABLE if event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM else CANCELLED
                    call._finish(CallError(code, f"the server reset the stream ({event.error_code!r})"))
                    self._release_slot()
            elif kind is h2.events.WindowUpdated:
                self._send_unsent()
            elif kind is h2.events.RemoteSettingsChanged:
                self._release_slot()
            elif kind is h2.events.PingAckReceived:
                self._ping_unanswered = False
            elif kind is h2.events.ConnectionTerminated:
                self._goaway(event)
        return True

    def _consumed(self, call: StreamCall[Any] | None, sid: int, length: int) -> None:
        """Reopen the receive windows once half of one is used (rare: a generation is small)."""
        self._unacked += length
        if self._unacked >= _WINDOW // 2:
            self._window_update(0, self._unacked)
            self._unacked = 0
        if call is not None:
            call._unacked += length
            if call._unacked >= _WINDOW // 2:
                self._window_update(sid, call._unacked)
                call._unacked = 0

    def _window_update(self, sid: int, increment: int) -> None:
        self._flush()
        if self._transport is not None and not self.closed:
            self._transport.write(b"\x00\x00\x04\x08\x00" + sid.to_bytes(4, "big") + increment.to_bytes(4, "big"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._ping_timer is not None:
            self._ping_timer.cancel()
        reason = f": {exc}" if exc else ""
        self._fail_all(CallError(UNAVAILABLE, f"the connection to the server was lost{reason}"))
        for waiter in self._slots:
            if not waiter.done():
                waiter.set_result(None)

    # -- calls ---------------------------------------------------------------------------------

    async def open(self, path: bytes, message: bytes, parse: Callable[[bytes], T]) -> StreamCall[T]:
        """Start a call, send its one request message and half-close it. Beyond the server's
        concurrent-stream limit (h2 refuses the headers), wait for a call to end."""
        call: StreamCall[T] = StreamCall(self, parse)
        while True:
            if not self.usable:
                raise CallError(UNAVAILABLE, "the connection to the server is closing")
            sid = call.stream_id = self._h2.get_next_available_stream_id()
            try:
                self._h2.send_headers(
                    sid,
                    [
                        (b":method", b"POST"),
                        (b":scheme", self._scheme),
                        (b":path", path),
                        (b":authority", self._authority),
                        (b"content-type", b"application/grpc"),
                        (b"te", b"trailers"),
                        (b"user-agent", b"triton-openai-gateway"),
                    ],
                )
                break
            except h2.exceptions.TooManyStreamsError:
                waiter = self.loop.create_future()
                self._slots.append(waiter)
                await waiter
            except h2.exceptions.ProtocolError as exc:  # the connection is closing under us
                self.going_away = True
                raise CallError(UNAVAILABLE, f"cannot start a call on this connection: {exc}") from exc
        if sid > _LAST_STREAM_ID:
            self.going_away = True  # stream ids run out: the next call opens a new connection
        self._calls[sid] = call
        self._unsent[sid] = b"\x00" + len(message).to_bytes(4, "big") + message
        self._send_unsent()
        self._flush()
        return call

    def cancel(self, call: StreamCall[Any]) -> None:
        sid = call.stream_id
        if self._calls.pop(sid, None) is None:
            return  # already ended
        self._unsent.pop(sid, None)
        self._release_slot()
        if self.closed:
            return
        try:
            self._h2.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        except h2.exceptions.StreamClosedError:
            return
        self._flush()

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            try:
                self._h2.close_connection()
                self._flush()
            finally:
                self._transport.close()

    # -- internals ------------------------------------------------------------------------------

    def _send_unsent(self) -> None:
        h2conn = self._h2
        for sid, data in list(self._unsent.items()):
            try:
                while data:
                    room = min(h2conn.local_flow_control_window(sid), h2conn.max_outbound_frame_size)
                    if room <= 0:
                        break
                    piece, data = data[:room], data[room:]
                    h2conn.send_data(sid, piece, end_stream=not data)
            except h2.exceptions.StreamClosedError:
                data = b""  # the server already ended this call; its end reaches the consumer
            if data:
                self._unsent[sid] = data
            else:
                del self._unsent[sid]

    def _flush(self) -> None:
        out = self._h2.data_to_send()
        if out and self._transport is not None and not self.closed:
            self._transport.write(out)

    def _release_slot(self) -> None:
        """A call left: let a waiting caller open one; close a retired connection once idle."""
        if self.going_away and not self._calls and self._transport is not None and not self.closed:
            self._transport.close()
        while self._slots:
            waiter = self._slots.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _fail_all(self, error: CallError) -> None:
        calls, self._calls = self._calls, {}
        self._unsent.clear()
        for call in calls.values():
            call._finish(error)

    def _goaway(self, event: h2.events.ConnectionTerminated) -> None:
        """The server is leaving: calls it never took fail as retryable; new calls go elsewhere."""
        self.going_away = True
        last = event.last_stream_id if event.last_stream_id is not None else 0
        refused = CallError(UNAVAILABLE, "the server is shutting down (GOAWAY)")
        for sid in [sid for sid in self._calls if sid > last or event.error_code != h2.errors.ErrorCodes.NO_ERROR]:
            self._unsent.pop(sid, None)
            self._calls.pop(sid)._finish(refused)
        for waiter in self._slots:
            if not waiter.done():
                waiter.set_result(None)
        self._release_slot()

    def _ping(self) -> None:
        """Keepalive: a connection whose ping went unanswered for a whole interval is dead (a
        half-open TCP connection would otherwise hang every call on it)."""
        if self.closed or self._keepalive is None:
            return
        if self._ping_unanswered and self._transport is not None:
            self._fail_all(CallError(UNAVAILABLE, "the server stopped answering keepalive pings"))
            self._transport.abort()
            return
        if self._calls:
            self._ping_unanswered = True
            self._h2.ping(b"gwalive!")
            self._flush()
        self._ping_timer = self.loop.call_later(self._keepalive, self._ping)


async def connect(
    target: str, *, ssl_context: ssl.SSLContext | None = None, keepalive: float | None = None, timeout: float = 5.0
) -> GrpcConnection:
    """Open a connection to ``host:port``."""
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {target!r}")
    host = host.strip("[]")
    loop = asyncio.get_running_loop()
    _, protocol = await asyncio.wait_for(
        loop.create_connection(
            lambda: GrpcConnection(target, "https" if ssl_context else "http", keepalive),
            host,
            int(port),
            ssl=ssl_context,
            server_hostname=host if ssl_context else None,
        ),
        timeout,
    )
    return protocol


class H2Transport:
    """The ``StreamTransport`` over one shared ``GrpcConnection``, (re)opened on demand, so a
    Triton restart costs the calls that were on the old connection and nothing after."""

    def __init__(
        self, target: str, *, ssl_context: ssl.SSLContext | None = None, keepalive: float | None = None
    ) -> None:
        self.target = target
        self._ssl = ssl_context
        self._keepalive = keepalive
        self._connection: GrpcConnection | None = None
        self._connecting = asyncio.Lock()

    async def _usable_connection(self) -> GrpcConnection:
        connection = self._connection
        if connection is not None and connection.usable:
            return connection
        async with self._connecting:
            connection = self._connection
            if connection is not None and connection.usable:
                return connection
            try:
                connection = await connect(self.target, ssl_context=self._ssl, keepalive=self._keepalive)
            except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
                raise CallError(UNAVAILABLE, f"cannot connect to {self.target} ({exc or type(exc).__name__})") from exc
            self._connection = connection
            return connection

    async def open(self, path: bytes, message: bytes, parse: Callable[[bytes], T]) -> StreamCall[T]:
        connection = await self._usable_connection()
        return await connection.open(path, message, parse)

    async def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
