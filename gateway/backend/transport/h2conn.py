"""Streaming gRPC calls over one HTTP/2 connection that the event loop reads itself.

Why not ``grpc.aio`` for the token stream: it receives every message on a gRPC core thread, hands
it to a poller thread, which wakes the event loop through a socket pair. strace on the gateway
under load counted 2.6 futex calls, a pipe write and a pipe read per token, and the whole relay cost
about 50-60 µs of CPU per message before any HTTP work (docs/PERFORMANCE.md). Here the loop reads
the socket: one ``data_received`` carries every frame that arrived, and each gRPC message is parsed
and queued for its call in place, with no thread and no task. Unary control calls (readiness, the
repository index) stay on ``grpc.aio``: they are not on the hot path.

The h2 library keeps HTTP/2's state (HPACK, settings, stream states, resets, GOAWAY, pings) for
every frame except DATA payloads: those (one frame per token) are cut out of the bytes here and
handed to their call, because feeding them through h2 cost +10 µs per token in
``bench/hotpath.py`` (~16 → ~26 µs; docs/PERFORMANCE.md). A DATA frame that ends its stream
reaches h2 as an empty DATA frame with END_STREAM, so h2 tracks the stream's end while its receive
windows are never touched: the receive-side flow control has one owner, this module (the
connection window given back as bytes arrive, each stream's as its consumer takes the messages:
``h2call.py``).

The calls are half-closed after their one request message, so a response stream ends with the
server's trailers. Cancelling a call sends ``RST_STREAM(CANCEL)``, which Triton turns into
``is_cancelled()`` for the model. Knows nothing of Triton's tensors or of OpenAI: messages are
handed to a ``parse`` function given per call.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from hyperframe.frame import Frame, GoAwayFrame

from gateway.backend.transport.base import (
    CANCELLED,
    DEADLINE_EXCEEDED,
    UNAVAILABLE,
    CallError,
)
from gateway.backend.transport.h2call import StreamCall
from gateway.backend.transport.h2headers import RepeatingHeadersEncoder, call_headers, client_config

T = TypeVar("T")

_END_STREAM, _PADDED = 0x1, 0x8
_EMPTY_END_STREAM = b"\x00\x00\x00\x00\x01"
"""The head of an empty DATA frame with END_STREAM (the stream id follows): what h2 sees of a
DATA frame that ends its stream."""

_LAST_STREAM_ID = 2**31 - 1 - 2 * 65536
"""Retire a connection well before HTTP/2's stream ids run out (after ~1e9 calls)."""

_STREAM_WINDOW = 4 * 1024 * 1024
"""Receive window per call: how much a call's consumer may fall behind before Triton waits for it
(thousands of tokens), and so the most a slow client holds in the gateway's memory."""

_CONNECTION_WINDOW = 16 * 1024 * 1024
"""Receive window of the connection, given back as bytes arrive whatever the calls do with them."""

_LARGE_FRAME = 4096
"""A DATA frame at least this large is handed to its call as a view (a token's frame is ~200 B)."""

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass
class Keepalive:
    """One keepalive policy, shared by a transport and its connections: while calls are open, a
    PING every ``interval`` seconds; one unanswered for ``timeout`` seconds means the connection is
    dead (a half-open TCP connection would otherwise hang every call on it). A server that answers
    GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings") doubles ``interval`` for every later connection,
    as gRPC's own clients do."""

    interval: float
    timeout: float

    def back_off(self) -> None:
        self.interval *= 2


class _DrainingH2Connection(h2.connection.H2Connection):
    """h2 moves the whole connection to CLOSED on any GOAWAY it receives (python-hyper/h2#1181),
    so after the graceful GOAWAY(2^31-1) + PING that grpc servers, Envoy and nginx send when they
    drain, the PING and every later frame of the calls the server still serves raise ProtocolError.
    A GOAWAY with NO_ERROR here only reports the event; ``GrpcConnection`` stops opening calls on
    the connection and closes it once its last call ends. Any other GOAWAY keeps h2's behaviour."""

    def _receive_goaway_frame(self, frame: GoAwayFrame) -> tuple[list[Frame], list[h2.events.Event]]:
        if frame.error_code != h2.errors.ErrorCodes.NO_ERROR:
            return super()._receive_goaway_frame(frame)
        event = h2.events.ConnectionTerminated()
        event.error_code = h2.errors.ErrorCodes.NO_ERROR
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data or None
        return [], [event]


class GrpcConnection(asyncio.Protocol):
    """One HTTP/2 connection to a gRPC server, carrying any number of ``StreamCall`` s."""

    def __init__(
        self,
        authority: str,
        scheme: str,
        keepalive: Keepalive | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self._authority = authority.encode()
        self._scheme = scheme.encode()
        self._h2 = _DrainingH2Connection(client_config())
        self._h2.encoder = RepeatingHeadersEncoder()  # before any frame: nothing encoded yet
        self._transport: asyncio.Transport | None = None
        self._inbuf = b""
        self._stream_window = _STREAM_WINDOW
        self._connection_window = _CONNECTION_WINDOW
        self._unacked = 0
        self._max_message = max_message_bytes
        self._calls: dict[int, StreamCall[Any]] = {}
        self._unsent: dict[int, bytes] = {}
        """Request bytes waiting for send window (a prompt larger than Triton's window)."""
        self._slots: deque[asyncio.Future[None]] = deque()
        """Callers waiting for the server's concurrent-stream limit to allow another call."""
        self._keepalive = keepalive
        self._ping_timer: asyncio.TimerHandle | None = None
        self._ping_deadline: asyncio.TimerHandle | None = None
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
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self._stream_window,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            }
        )
        self._flush()
        self._window_update(0, self._connection_window - 65_535)
        self._schedule_ping()

    def data_received(self, data: bytes) -> None:
        """Split the bytes into HTTP/2 frames: DATA payloads go to their call here, every other
        frame goes to h2, in order (see the module docstring)."""
        if self._inbuf:
            data = self._inbuf + data
        size, pos = len(data), 0
        calls = self._calls
        while size - pos >= 9:
            length = int.from_bytes(data[pos : pos + 3], "big")
            end = pos + 9 + length
            if end > size:
                break
            if data[pos + 3] == 0:
                self._unacked += length
                flags = data[pos + 4]
                call = calls.get(int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF)
                if call is not None:
                    start = pos + 9
                    if flags & _PADDED:
                        call._data(data[start + 1 : end - data[start]], length)
                    elif length < _LARGE_FRAME:
                        call._data(data[start:end], length)
                    else:  # likely a piece of a large message: gathered without a copy
                        call._data(memoryview(data)[start:end], length)
                if flags & _END_STREAM and not self._control(_EMPTY_END_STREAM + data[pos + 5 : pos + 9]):
                    return
            elif not self._control(data[pos:end]):
                return
            pos = end
        self._inbuf = data[pos:] if pos < size else b""
        if self._unacked >= self._connection_window // 2:
            self._window_update(0, self._unacked)
            self._unacked = 0
        self._flush()

    def _control(self, frame: bytes) -> bool:
        """One frame through h2. False when the connection is unusable after it."""
        try:
            events = self._h2.receive_data(frame)
        except h2.exceptions.ProtocolError as exc:
            self._fail_all(CallError(UNAVAILABLE, f"HTTP/2 protocol error from the server: {exc}"))
            if self._transport is not None:
                self._transport.abort()
            return False
        calls = self._calls
        for event in events:
            if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                call = calls.get(event.stream_id)
                if call is not None:
                    call._headers(event.headers)
            elif isinstance(event, h2.events.StreamEnded):
                call = calls.pop(event.stream_id, None)
                if call is not None:
                    call._ended()
                    self._release_slot()
            elif isinstance(event, h2.events.StreamReset):
                self._reset(event)
            elif isinstance(event, h2.events.WindowUpdated):
                self._send_unsent()
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                self._send_unsent()  # a larger INITIAL_WINDOW_SIZE opens room for queued requests
                self._wake_slots()
            elif isinstance(event, h2.events.PingAckReceived):
                if self._ping_deadline is not None:
                    self._ping_deadline.cancel()
                    self._ping_deadline = None
            elif isinstance(event, h2.events.ConnectionTerminated):
                if not self._goaway(event):
                    return False
        return True

    def _reset(self, event: h2.events.StreamReset) -> None:
        call = self._calls.pop(event.stream_id, None)
        self._unsent.pop(event.stream_id, None)
        if call is None:
            return
        if event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM:
            # The server did not start it (RFC 9113 §8.7), and it refuses calls on this connection:
            # send them elsewhere. The calls it took go on.
            self.going_away = True
            call._finish(CallError(UNAVAILABLE, "the server refused the stream (REFUSED_STREAM)", retryable=True))
        else:
            call._finish(CallError(CANCELLED, f"the server reset the stream ({event.error_code!r})"))
        self._release_slot()

    def _release(self, call: StreamCall[Any], length: int) -> None:
        """``call`` is done with ``length`` bytes: give them back to its stream's window, in one
        WINDOW_UPDATE per half window."""
        unacked = call._unacked + length
        if unacked < self._stream_window // 2:
            call._unacked = unacked
            return
        call._unacked = 0
        if not call._done:
            self._window_update(call.stream_id, unacked)

    def _window_update(self, sid: int, increment: int) -> None:
        self._flush()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"\x00\x00\x04\x08\x00" + sid.to_bytes(4, "big") + increment.to_bytes(4, "big"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for timer in (self._ping_timer, self._ping_deadline):
            if timer is not None:
                timer.cancel()
        reason = f": {exc}" if exc else ""
        self._fail_all(CallError(UNAVAILABLE, f"the connection to the server was lost{reason}"))
        self._wake_slots()

    # -- calls ---------------------------------------------------------------------------------

    async def open(
        self, path: bytes, message: bytes, parse: Callable[[bytes], T], deadline: float | None = None
    ) -> StreamCall[T]:
        """Start a call, send its one request message and half-close it. Beyond the server's
        concurrent-stream limit (h2 refuses the headers), wait for a call to end, until
        ``deadline`` (``time.monotonic()``). Raises a retryable ``CallError`` when the connection
        is closing: the caller opens the call on another one."""
        call: StreamCall[T] = StreamCall(self, parse, self._max_message)
        while True:
            if not self.usable:
                raise CallError(UNAVAILABLE, "the connection to the server is closing", retryable=True)
            sid = call.stream_id = self._h2.get_next_available_stream_id()
            try:
                self._h2.send_headers(sid, call_headers(self._scheme, self._authority, path))
                break
            except h2.exceptions.TooManyStreamsError:
                await self._wait_for_slot(deadline)
            except h2.exceptions.ProtocolError as exc:  # the connection is closing under us
                self.going_away = True
                raise CallError(UNAVAILABLE, f"cannot start a call on this connection: {exc}", retryable=True) from exc
        if sid > _LAST_STREAM_ID:
            self.going_away = True  # stream ids run out: the next call opens a new connection
        self._calls[sid] = call
        self._unsent[sid] = b"\x00" + len(message).to_bytes(4, "big") + message
        self._send_unsent()
        self._flush()
        return call

    async def _wait_for_slot(self, deadline: float | None) -> None:
        waiter = self.loop.create_future()
        self._slots.append(waiter)
        if deadline is None:
            await waiter
            return
        try:
            await asyncio.wait_for(waiter, max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            limit = self._h2.remote_settings.max_concurrent_streams
            raise CallError(
                DEADLINE_EXCEEDED, f"the deadline passed while waiting for a stream slot (the server allows {limit})"
            ) from None

    def cancel(self, call: StreamCall[Any]) -> None:
        sid = call.stream_id
        if self._calls.pop(sid, None) is None:
            return  # already ended
        self._unsent.pop(sid, None)
        if not self.closed:
            try:
                self._h2.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
            except h2.exceptions.ProtocolError:  # StreamClosedError included: it already ended
                pass
            else:
                self._flush()
        self._release_slot()

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            try:
                self._h2.close_connection()
                self._flush()
            except h2.exceptions.ProtocolError:
                pass  # h2 already closed it (a GOAWAY with an error)
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
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(out)

    def _release_slot(self) -> None:
        """A call left: let a waiting caller open one; close a retired connection once idle."""
        if self.going_away and not self._calls:
            self._wake_slots()  # they open their call on another connection
            self.close()
            return
        while self._slots:
            waiter = self._slots.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _wake_slots(self) -> None:
        slots, self._slots = self._slots, deque()
        for waiter in slots:
            if not waiter.done():
                waiter.set_result(None)

    def _fail_all(self, error: CallError) -> None:
        """The connection is gone: each call fails, retryable when its request never fully left
        (the server cannot have started a call whose message it never had whole)."""
        calls, self._calls = self._calls, {}
        unsent, self._unsent = self._unsent, {}
        for sid, call in calls.items():
            call._finish(CallError(error.code, error.details, retryable=True) if sid in unsent else error)

    def _goaway(self, event: h2.events.ConnectionTerminated) -> bool:
        """The server is leaving. Calls above its last stream id never started: they fail as
        retryable. After a graceful GOAWAY (NO_ERROR, which may come again with a lower id) the
        others run to their end and the connection closes after the last; after any other the
        connection is closed now and its calls fail. False in that case."""
        self.going_away = True
        last = event.last_stream_id if event.last_stream_id is not None else 0
        graceful = event.error_code == h2.errors.ErrorCodes.NO_ERROR
        debug = event.additional_data or b""
        if (
            event.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
            and debug == b"too_many_pings"
            and self._keepalive is not None
        ):
            self._keepalive.back_off()
        why = f"GOAWAY {event.error_code!r}" + (f" {debug.decode('utf-8', 'replace')!r}" if debug else "")
        for sid in [sid for sid in self._calls if sid > last or not graceful]:
            self._unsent.pop(sid, None)
            call = self._calls.pop(sid)
            if sid > last:
                call._finish(CallError(UNAVAILABLE, f"the server did not take this call ({why})", retryable=True))
            else:
                call._finish(CallError(UNAVAILABLE, f"the server closed the connection ({why})"))
        self._wake_slots()
        if not graceful:
            if self._transport is not None:
                self._transport.close()
            return False
        self._release_slot()
        return True

    def _schedule_ping(self) -> None:
        if self._keepalive is not None and not self.closed:
            self._ping_timer = self.loop.call_later(self._keepalive.interval, self._ping)

    def _ping(self) -> None:
        if self.closed or self._keepalive is None:
            return
        if self._calls and self._ping_deadline is None:
            try:
                self._h2.ping(b"gwalive!")
            except h2.exceptions.ProtocolError:
                return  # h2 closed the connection: its end is on its way
            self._flush()
            self._ping_deadline = self.loop.call_later(self._keepalive.timeout, self._ping_unanswered)
        self._schedule_ping()

    def _ping_unanswered(self) -> None:
        self._ping_deadline = None
        if self.closed or self._transport is None or self._keepalive is None:
            return
        self._fail_all(
            CallError(UNAVAILABLE, f"the server did not answer a keepalive ping within {self._keepalive.timeout:g} s")
        )
        self._transport.abort()
