"""Streaming gRPC calls over one HTTP/2 connection that the event loop reads itself.

Why not ``grpc.aio`` for the token stream: it receives every message on a gRPC core thread, hands
it to a poller thread, which wakes the event loop through a socket pair. strace on the gateway
under load counted 2.6 futex calls, a pipe write and a pipe read per token, and the whole relay cost
about 50-60 µs of CPU per message before any HTTP work (docs/PERFORMANCE.md). Here the loop reads
the socket: one ``data_received`` carries every frame that arrived, and each gRPC message is parsed
and queued for its call in place, with no thread and no task. Unary control calls (readiness, the
repository index) stay on ``grpc.aio``: they are not on the hot path.

Why not the h2 library (measured in this module's place): a call's HTTP/2 frames
through h2 (its request headers and data, the response headers, the trailers) cost ~220 µs of CPU
in one hot process, more than the gateway's whole request path, and two to four times that in the
gateway, half of it on the way to the first token (docs/PERFORMANCE.md). A gRPC client uses a
small part of HTTP/2, and this module speaks exactly that part (RFC 9113):

- the preface and our SETTINGS (no push; a 4 MiB stream window), the server's SETTINGS applied and
  acknowledged (header table size, concurrent streams, initial window, frame size);
- per call: HEADERS (+ CONTINUATION) with the HPACK block, DATA with END_STREAM, then the response
  HEADERS, DATA and trailers, or RST_STREAM either way;
- flow control both ways: the connection and each stream's send windows, and receive windows given
  back as bytes arrive (the connection's) or as the consumer takes the messages (each call's:
  ``h2call.py``);
- PING answered, keepalive PINGs sent, GOAWAY read (graceful or not) and sent on close;
- a server that breaks the protocol (a frame too large, a push, a frame on a stream the client
  never opened, a broken or endless header block, a window overflow) ends the connection and its
  calls, with a GOAWAY that says why; frames on a stream that already ended (a reset crossing the
  server's last frames) are dropped, their header blocks still decoded. A fault confined to one
  stream (DATA past its window, a bad WINDOW_UPDATE on it, response headers over our
  SETTINGS_MAX_HEADER_LIST_SIZE but decodable) resets that stream only (RFC 9113 §5.4);
- PING and SETTINGS floods are answered while the server reads the answers; one that goes on
  while our writes are backed up ends with GOAWAY(ENHANCE_YOUR_CALM) (``_answer``).

HPACK is the ``hpack`` library's (with the per-connection caches of ``h2headers.py``). The unit
tests (``tests/unit/test_transport_*.py``) run every rule above against a server made with h2, and
the integration suite streams through real Triton: directly, through nginx's gRPC proxy, over TLS.

Calls are half-closed after their one request message, so a response stream ends with the server's
trailers. Cancelling a call sends ``RST_STREAM(CANCEL)``, which Triton turns into
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

import hpack

from gateway.backend.transport.base import (
    CANCELLED,
    DEADLINE_EXCEEDED,
    INTERNAL,
    PERMISSION_DENIED,
    RESOURCE_EXHAUSTED,
    UNAVAILABLE,
    CallError,
    Metadata,
)
from gateway.backend.transport.h2call import StreamCall
from gateway.backend.transport.h2frames import (
    ACK,
    CANCEL,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_HEAD,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADER_TABLE_SIZE,
    HEADERS,
    INADEQUATE_SECURITY,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE,
    MAX_WINDOW,
    NO_ERROR,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    ProtocolViolation,
    error_name,
    frame,
)
from gateway.backend.transport.h2headers import (
    MAX_HEADER_LIST,
    HeaderListTooLargeError,
    RepeatingHeadersDecoder,
    RepeatingHeadersEncoder,
    call_headers,
    literal_headers,
)

T = TypeVar("T")

_LAST_STREAM_ID = 2**31 - 1 - 2 * 65536
"""Retire a connection well before HTTP/2's stream ids run out (after ~1e9 calls)."""

_STREAM_WINDOW = 4 * 1024 * 1024
"""Receive window per call: how much a call's consumer may fall behind before Triton waits for it
(thousands of tokens), and so the most a slow client holds in the gateway's memory."""

_CONNECTION_WINDOW = 16 * 1024 * 1024
"""Receive window of the connection, given back as bytes arrive whatever the calls do with them."""

_LARGE_FRAME = 4096
"""A DATA frame at least this large is handed to its call as a view (a token's frame is ~200 B)."""

_KEEPALIVE_PAYLOAD = b"gwalive!"

_MAX_HEADER_BLOCK = 4 * MAX_HEADER_LIST
"""The most a header block may take on the wire, each of its frames counted with its 9-byte head (so
empty CONTINUATION frames cannot pile up either): past it the block is not buffered further."""

_MAX_QUEUED_CONTROL = 10_000
"""PING and SETTINGS answers queued while our writes back up (``pause_writing``) before the server
counts as flooding without reading them (Go's net/http2 uses the same bound)."""

_RESET_STATUS = {
    CANCEL: CANCELLED,
    REFUSED_STREAM: UNAVAILABLE,
    ENHANCE_YOUR_CALM: RESOURCE_EXHAUSTED,
    INADEQUATE_SECURITY: PERMISSION_DENIED,
}
"""The gRPC status of a call the server reset, by RST_STREAM code; INTERNAL for any other (gRPC's
table, doc/PROTOCOL-HTTP2.md "Errors", which grpc.aio applies too)."""

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
        self._encoder = RepeatingHeadersEncoder()
        self._decoder = RepeatingHeadersDecoder()
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        """Frames waiting for ``_flush``: whatever one event makes us say goes out in one write."""
        self._inbuf = b""
        self._stream_window = _STREAM_WINDOW
        self._connection_window = _CONNECTION_WINDOW
        self._unacked = 0
        self._max_message = max_message_bytes
        self._next_stream_id = 1
        self._calls: dict[int, StreamCall[Any]] = {}
        self._unsent: dict[int, bytes] = {}
        """Request bytes waiting for send window (a prompt larger than Triton's window)."""
        self._send_windows: dict[int, int] = {}
        """The send window of each call that still has request bytes to send."""
        self._send_window = DEFAULT_WINDOW
        """The connection's send window."""
        self._peer_initial_window = DEFAULT_WINDOW
        self._peer_max_frame = DEFAULT_MAX_FRAME
        self._peer_max_streams = 2**31
        self._headers_in: tuple[int, int, list[bytes]] | None = None
        """A header block still arriving in CONTINUATION frames: its stream, its flags, its pieces."""
        self._headers_in_size = 0
        """Its size so far, frame heads included (bounded by ``_MAX_HEADER_BLOCK``)."""
        self._write_paused = False
        """The transport's write buffer is over its high-water mark: the server is not reading."""
        self._queued_control = 0
        """PING and SETTINGS answers queued since writing paused."""
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
        settings = ENABLE_PUSH.to_bytes(2, "big") + (0).to_bytes(4, "big")
        settings += INITIAL_WINDOW_SIZE.to_bytes(2, "big") + self._stream_window.to_bytes(4, "big")
        settings += MAX_HEADER_LIST_SIZE.to_bytes(2, "big") + MAX_HEADER_LIST.to_bytes(4, "big")
        self._out += [PREFACE, frame(SETTINGS, 0, 0, settings)]
        self._out.append(frame(WINDOW_UPDATE, 0, 0, (self._connection_window - DEFAULT_WINDOW).to_bytes(4, "big")))
        self._flush()
        self._schedule_ping()

    def data_received(self, data: bytes) -> None:
        """Split the bytes into frames. DATA payloads go to their call here, at the cost of a few
        slices per token; every other frame goes to ``_control``, in order."""
        if self._inbuf:
            data = self._inbuf + data
        size, pos = len(data), 0
        calls = self._calls
        try:
            while size - pos >= 9:
                length_kind, flags, sid = FRAME_HEAD(data, pos)
                length = length_kind >> 8
                if length > DEFAULT_MAX_FRAME:
                    raise ProtocolViolation(FRAME_SIZE_ERROR, f"a frame of {length} bytes (the limit is 16384)")
                end = pos + 9 + length
                if end > size:
                    break
                if length_kind & 0xFF == DATA and self._headers_in is None:
                    self._unacked += length
                    sid &= 0x7FFFFFFF
                    call = calls.get(sid)
                    if call is not None:
                        start = pos + 9
                        if flags & PADDED:
                            if not length or data[start] >= length:
                                raise ProtocolViolation(PROTOCOL_ERROR, "a DATA frame's padding is longer than it")
                            call.receive_data(data[start + 1 : end - data[start]], length)
                        elif length < _LARGE_FRAME:
                            call.receive_data(data[start:end], length)
                        else:  # likely a piece of a large message: gathered without a copy
                            call.receive_data(memoryview(data)[start:end], length)
                        if flags & END_STREAM:
                            self._end(sid)
                    else:
                        self._check_known(sid, "DATA")
                else:
                    self._control(data, pos, end)
                    if self.closed:  # a GOAWAY with an error: nothing after it is read
                        return
                pos = end
        except ProtocolViolation as exc:
            self._protocol_error(exc)
            return
        if self.closed:
            return
        self._inbuf = data[pos:] if pos < size else b""
        if self._unacked >= self._connection_window // 2:
            if self._unacked > self._connection_window:  # we give it back after every read: one read held more
                self._protocol_error(
                    ProtocolViolation(FLOW_CONTROL_ERROR, "the server sent past the connection's flow-control window")
                )
                return
            self._out.append(frame(WINDOW_UPDATE, 0, 0, self._unacked.to_bytes(4, "big")))
            self._unacked = 0
        if self._out:  # most reads (a token each) write nothing
            self._flush()

    def _control(self, data: bytes, pos: int, end: int) -> None:
        """Every frame but a call's DATA; raises ``ProtocolViolation`` for a protocol violation."""
        kind, flags = data[pos + 3], data[pos + 4]
        sid = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        payload = data[pos + 9 : end]
        pending = self._headers_in
        if pending is not None:
            if kind != CONTINUATION or sid != pending[0]:
                raise ProtocolViolation(PROTOCOL_ERROR, "a header block was interrupted by another frame")
            self._headers_in_size += end - pos
            if self._headers_in_size > _MAX_HEADER_BLOCK:
                raise ProtocolViolation(ENHANCE_YOUR_CALM, f"a header block larger than {_MAX_HEADER_BLOCK} bytes")
            pending[2].append(payload)
            if flags & END_HEADERS:
                self._headers_in = None
                self._header_block(pending[0], pending[1], b"".join(pending[2]))
            return
        if kind == HEADERS:
            self._headers_frame(sid, flags, payload)
        elif kind == RST_STREAM:
            if sid == 0 or len(payload) != 4:
                raise ProtocolViolation(PROTOCOL_ERROR if sid == 0 else FRAME_SIZE_ERROR, "a malformed RST_STREAM")
            self._check_known(sid, "RST_STREAM")
            self._reset(sid, int.from_bytes(payload, "big"))
        elif kind == SETTINGS:
            self._settings(sid, flags, payload)
        elif kind == PING:
            if sid != 0 or len(payload) != 8:
                raise ProtocolViolation(PROTOCOL_ERROR if sid else FRAME_SIZE_ERROR, "a malformed PING")
            if not flags & ACK:
                self._answer(frame(PING, ACK, 0, payload))
            elif payload == _KEEPALIVE_PAYLOAD and self._ping_deadline is not None:
                self._ping_deadline.cancel()
                self._ping_deadline = None
        elif kind == GOAWAY:
            if sid != 0 or len(payload) < 8:
                raise ProtocolViolation(PROTOCOL_ERROR if sid else FRAME_SIZE_ERROR, "a malformed GOAWAY")
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            self._goaway(last, int.from_bytes(payload[4:8], "big"), payload[8:])
        elif kind == WINDOW_UPDATE:
            self._window_updated(sid, payload)
        elif kind == PUSH_PROMISE:
            raise ProtocolViolation(PROTOCOL_ERROR, "a PUSH_PROMISE, though push is disabled")
        elif kind == CONTINUATION:
            raise ProtocolViolation(PROTOCOL_ERROR, "a CONTINUATION frame without a header block before it")
        elif kind == PRIORITY and sid == 0:
            raise ProtocolViolation(PROTOCOL_ERROR, "a PRIORITY frame on stream 0")
        # PRIORITY otherwise, and frame types this version does not know: ignored (RFC 9113 §4.1).

    def _headers_frame(self, sid: int, flags: int, payload: bytes) -> None:
        self._check_known(sid, "HEADERS")
        start, stop = 0, len(payload)
        if flags & PADDED:
            if not payload or payload[0] >= len(payload):
                raise ProtocolViolation(PROTOCOL_ERROR, "a HEADERS frame's padding is longer than it")
            start, stop = 1, len(payload) - payload[0]
        if flags & PRIORITY_FLAG:
            start += 5
            if start > stop:
                raise ProtocolViolation(FRAME_SIZE_ERROR, "a HEADERS frame too short for its priority")
        block = payload[start:stop]
        if flags & END_HEADERS:
            self._header_block(sid, flags, block)
        else:
            self._headers_in = (sid, flags, [block])
            self._headers_in_size = 9 + len(payload)

    def _header_block(self, sid: int, flags: int, block: bytes) -> None:
        """A complete header block: decoded whatever its stream (the table must follow the
        server's), then the response headers or trailers of the call."""
        try:
            headers = self._decoder.decode_block(block)
        except HeaderListTooLargeError as exc:  # decoded whole: only this stream is at fault
            call = self._calls.get(sid)
            if call is not None:
                call.fail(CallError(RESOURCE_EXHAUSTED, str(exc)))
                if flags & END_STREAM:
                    self._end(sid)  # over on both sides: nothing to reset
                else:
                    self.cancel(call)
            return
        except hpack.HPACKError as exc:
            raise ProtocolViolation(COMPRESSION_ERROR, f"an undecodable header block ({exc})") from None
        call = self._calls.get(sid)
        if call is None:
            return
        call.receive_headers(headers)  # may end the call (a non-gRPC HTTP status)
        if flags & END_STREAM:
            self._end(sid)

    def _forget(self, sid: int) -> StreamCall[Any] | None:
        """The stream is over: its call (None if it already ended), no longer tracked, and its
        unsent request bytes and send window dropped."""
        self._unsent.pop(sid, None)
        self._send_windows.pop(sid, None)
        return self._calls.pop(sid, None)

    def _end(self, sid: int) -> None:
        """The server ended the stream."""
        call = self._forget(sid)
        if call is not None:
            call.stream_ended()
            self._release_slot()

    def _check_known(self, sid: int, what: str) -> None:
        """A frame on a stream the client never opened is a connection error (RFC 9113 §5.1);
        one on a stream that ended (a reset crossing the server's last frames) is dropped."""
        if sid == 0 or sid % 2 == 0 or sid >= self._next_stream_id:
            raise ProtocolViolation(PROTOCOL_ERROR, f"{what} on stream {sid}, which the client did not open")

    def _reset(self, sid: int, code: int) -> None:
        call = self._forget(sid)
        if call is None:
            return
        if code == REFUSED_STREAM:
            # The server did not start it (RFC 9113 §8.7), and it refuses calls on this connection:
            # send them elsewhere. The calls it took go on.
            self.going_away = True
            call.fail(CallError(UNAVAILABLE, "the server refused the stream (REFUSED_STREAM)", retryable=True))
        else:
            status = _RESET_STATUS.get(code, INTERNAL)
            call.fail(CallError(status, f"the server reset the stream ({error_name(code)})"))
        self._release_slot()

    def _settings(self, sid: int, flags: int, payload: bytes) -> None:
        if sid != 0:
            raise ProtocolViolation(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise ProtocolViolation(FRAME_SIZE_ERROR, "a SETTINGS acknowledgement with a payload")
            return
        if len(payload) % 6:
            raise ProtocolViolation(FRAME_SIZE_ERROR, "a SETTINGS frame of a length not a multiple of 6")
        for at in range(0, len(payload), 6):
            name, value = int.from_bytes(payload[at : at + 2], "big"), int.from_bytes(payload[at + 2 : at + 6], "big")
            if name == HEADER_TABLE_SIZE:
                self._encoder.header_table_size = value  # the next block carries the size update
            elif name == ENABLE_PUSH:
                if value > 1:
                    raise ProtocolViolation(PROTOCOL_ERROR, f"SETTINGS_ENABLE_PUSH {value}")
            elif name == MAX_CONCURRENT_STREAMS:
                self._peer_max_streams = value
            elif name == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolViolation(FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE {value}")
                delta, self._peer_initial_window = value - self._peer_initial_window, value
                windows = self._send_windows
                for stream in windows:  # a change applies to the windows of open streams (§6.9.2)
                    windows[stream] += delta
                    if windows[stream] > MAX_WINDOW:
                        raise ProtocolViolation(
                            FLOW_CONTROL_ERROR, f"the new initial window overflows stream {stream}'s"
                        )
            elif name == MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value <= 2**24 - 1:
                    raise ProtocolViolation(PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE {value}")
                self._peer_max_frame = value
        self._answer(frame(SETTINGS, ACK, 0))
        self._send_unsent()  # a larger initial window opens room for queued requests
        self._wake_slots()  # a higher stream limit lets waiting callers in

    def _window_updated(self, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolViolation(FRAME_SIZE_ERROR, "a WINDOW_UPDATE of a length other than 4")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if sid == 0:
            if not increment:
                raise ProtocolViolation(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0 for the connection")
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise ProtocolViolation(FLOW_CONTROL_ERROR, "the connection's send window overflowed")
        else:
            self._check_known(sid, "WINDOW_UPDATE")
            if not increment:  # a stream error whether or not the call has bytes left to send (§6.9)
                if sid in self._calls:
                    self._fail_call(sid, PROTOCOL_ERROR, "a WINDOW_UPDATE of 0 on the stream")
                return
            window = self._send_windows.get(sid)
            if window is None:
                return  # a call that sent its whole request, or ended: nothing waits on it
            if window + increment > MAX_WINDOW:
                self._fail_call(sid, FLOW_CONTROL_ERROR, "a WINDOW_UPDATE overflowed the stream's send window")
                return
            self._send_windows[sid] = window + increment
        self._send_unsent()

    def _fail_call(self, sid: int, code: int, why: str) -> None:
        """A stream error (RFC 9113 §5.4.2): that call ends (retryable if its request never fully
        left), and the server gets RST_STREAM with ``code``."""
        unsent = sid in self._unsent
        call = self._forget(sid)
        self._out.append(frame(RST_STREAM, 0, sid, code.to_bytes(4, "big")))
        if call is not None:
            call.fail(CallError(UNAVAILABLE, f"HTTP/2 protocol error from the server: {why}", retryable=unsent))
            self._release_slot()

    def _answer(self, answer: bytes) -> None:
        """Queue a PING or SETTINGS acknowledgement. While the server does not read what we write,
        each one is counted: a server that floods us without reading the answers would otherwise
        grow our write buffer without bound (RFC 9113 §10.5)."""
        if self._write_paused:
            self._queued_control += 1
            if self._queued_control > _MAX_QUEUED_CONTROL:
                raise ProtocolViolation(
                    ENHANCE_YOUR_CALM, f"a flood of PING or SETTINGS frames: {_MAX_QUEUED_CONTROL} answers unread"
                )
        self._out.append(answer)

    def pause_writing(self) -> None:
        self._write_paused, self._queued_control = True, 0

    def resume_writing(self) -> None:
        self._write_paused = False

    def _protocol_error(self, exc: ProtocolViolation) -> None:
        """The server broke the protocol: every call fails, the server is told why, and the
        connection is closed."""
        self._fail_all(CallError(UNAVAILABLE, f"HTTP/2 protocol error from the server: {exc}"))
        self.going_away = True
        # The last stream id is the server's last stream we processed: it opened none.
        self._out.append(frame(GOAWAY, 0, 0, (0).to_bytes(4, "big") + exc.code.to_bytes(4, "big") + str(exc).encode()))
        self._close_now()

    def _close_now(self) -> None:
        """Write what is queued and close: ``data_received`` reads nothing after this. A server
        that is not reading (our writes paused) would keep a closing transport open until it
        read everything: the transport is aborted instead."""
        self._flush()
        if self._transport is not None:
            if self._write_paused:
                self._transport.abort()
            else:
                self._transport.close()
        self.closed = True
        self._cancel_timers()
        self._wake_slots()  # callers waiting for a slot here open their call elsewhere

    def release(self, call: StreamCall[Any], increment: int) -> None:
        """``CallOwner``: give ``increment`` bytes back to the call's stream window, now (the call
        gathers them to half a window first)."""
        self._out.append(frame(WINDOW_UPDATE, 0, call.stream_id, increment.to_bytes(4, "big")))
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timers()
        reason = f": {exc}" if exc else ""
        self._fail_all(CallError(UNAVAILABLE, f"the connection to the server was lost{reason}"))
        self._wake_slots()

    def _cancel_timers(self) -> None:
        for timer in (self._ping_timer, self._ping_deadline):
            if timer is not None:
                timer.cancel()

    # -- calls ---------------------------------------------------------------------------------

    async def open(
        self,
        path: bytes,
        message: bytes,
        parse: Callable[[bytes], T],
        deadline: float | None = None,
        metadata: Metadata = (),
    ) -> StreamCall[T]:
        """Start a call, send its one request message and half-close it. Beyond the server's
        concurrent-stream limit, wait for a call to end, until ``deadline``
        (``time.monotonic()``). Raises a retryable ``CallError`` when the connection is closing:
        the caller opens the call on another one."""
        call: StreamCall[T] = StreamCall(self, parse, self._max_message, self._stream_window)
        while True:
            if not self.usable:
                raise CallError(UNAVAILABLE, "the connection to the server is closing", retryable=True)
            if len(self._calls) < self._peer_max_streams:
                break
            await self._wait_for_slot(deadline)
        sid = call.stream_id = self._next_stream_id
        self._next_stream_id = sid + 2
        if sid > _LAST_STREAM_ID:
            self.going_away = True  # stream ids run out: the next call opens a new connection
        block = self._encoder.encode(call_headers(self._scheme, self._authority, path))
        if metadata:  # after the cached block, as literals that leave the dynamic table alone
            block += literal_headers(metadata)
        size = self._peer_max_frame
        if len(block) <= size:
            self._out.append(frame(HEADERS, END_HEADERS, sid, block))
        else:  # a header block larger than a frame (not ours in practice): CONTINUATION frames
            pieces = [block[at : at + size] for at in range(0, len(block), size)]
            self._out.append(frame(HEADERS, 0, sid, pieces[0]))
            for piece in pieces[1:-1]:
                self._out.append(frame(CONTINUATION, 0, sid, piece))
            self._out.append(frame(CONTINUATION, END_HEADERS, sid, pieces[-1]))
        self._calls[sid] = call
        self._unsent[sid] = b"\x00" + len(message).to_bytes(4, "big") + message
        self._send_windows[sid] = self._peer_initial_window
        self._send_unsent()
        self._flush()
        return call

    async def _wait_for_slot(self, deadline: float | None) -> None:
        waiter = self.loop.create_future()
        self._slots.append(waiter)
        try:
            await asyncio.wait_for(waiter, None if deadline is None else max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            limit = self._peer_max_streams
            raise CallError(
                DEADLINE_EXCEEDED, f"the deadline passed while waiting for a stream slot (the server allows {limit})"
            ) from None

    def cancel(self, call: StreamCall[Any]) -> None:
        """``CallOwner``: the call is over for its consumer; reset its stream unless it has ended."""
        self.reset(call, CANCEL)

    def reset(self, call: StreamCall[Any], code: int) -> None:
        """``CallOwner``: stop tracking the call and reset its stream with ``code``, unless it has ended."""
        sid = call.stream_id
        if self._forget(sid) is None:
            return  # already ended
        if not self.closed:
            self._out.append(frame(RST_STREAM, 0, sid, code.to_bytes(4, "big")))
            self._flush()
        self._release_slot()

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            last = (0).to_bytes(4, "big")  # the server opened no stream of its own
            self._out.append(frame(GOAWAY, 0, 0, last + NO_ERROR.to_bytes(4, "big")))
            self._flush()
            self._transport.close()

    # -- internals ------------------------------------------------------------------------------

    def _send_unsent(self) -> None:
        """Send what the windows allow of the queued request bytes, in frames the server takes."""
        windows, out = self._send_windows, self._out
        for sid, data in list(self._unsent.items()):
            window = windows[sid]
            while data:
                room = min(self._send_window, window, self._peer_max_frame)
                if room <= 0:
                    break
                piece, data = data[:room], data[room:]
                out.append(frame(DATA, 0 if data else END_STREAM, sid, piece))
                self._send_window -= len(piece)
                window -= len(piece)
            if data:
                self._unsent[sid] = data
                windows[sid] = window
            else:
                del self._unsent[sid]
                del windows[sid]

    def _flush(self) -> None:
        out = self._out
        if out:
            self._out = []
            if self._transport is not None and not self._transport.is_closing():
                self._transport.write(out[0] if len(out) == 1 else b"".join(out))

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
        self._send_windows = {}
        for sid, call in calls.items():
            call.fail(CallError(error.code, error.details, retryable=True) if sid in unsent else error)

    def _goaway(self, last: int, code: int, debug: bytes) -> None:
        """The server is leaving. Calls above its last stream id never started: they fail as
        retryable. After a graceful GOAWAY (NO_ERROR, which may come again with a lower id) the
        others run to their end and the connection closes after the last; after any other the
        connection is closed now and its calls fail."""
        self.going_away = True
        graceful = code == NO_ERROR
        if code == ENHANCE_YOUR_CALM and debug == b"too_many_pings" and self._keepalive is not None:
            self._keepalive.back_off()
        why = f"GOAWAY {error_name(code)}" + (f" {debug.decode('utf-8', 'replace')!r}" if debug else "")
        for sid, call in [(sid, call) for sid, call in self._calls.items() if sid > last or not graceful]:
            self._forget(sid)
            if sid > last:
                call.fail(CallError(UNAVAILABLE, f"the server did not take this call ({why})", retryable=True))
            else:
                call.fail(CallError(UNAVAILABLE, f"the server closed the connection ({why})"))
        self._wake_slots()
        if not graceful:
            self._close_now()
            return
        self._release_slot()

    def _schedule_ping(self) -> None:
        if self._keepalive is not None and not self.closed:
            self._ping_timer = self.loop.call_later(self._keepalive.interval, self._ping)

    def _ping(self) -> None:
        if self.closed or self._keepalive is None:
            return
        if self._calls and self._ping_deadline is None:
            self._out.append(frame(PING, 0, 0, _KEEPALIVE_PAYLOAD))
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
