"""One streaming gRPC call on a ``GrpcConnection``: message reassembly, per-call flow control,
the gRPC status, and the consumer's batches.

The per-token case is one DATA frame carrying one whole message: it is parsed straight from the
frame's bytes. A message split over frames is gathered as a list of the frames' pieces and joined
once, when it is complete, so a message of n bytes costs O(n) however it is cut (one copy: fresh
memory, whose page faults are most of the cost), and one larger than ``max_message_bytes`` ends the
call as soon as its 5-byte prefix is in, before anything is buffered.

Flow control: the connection gives the connection-level window back as bytes arrive, so no call
can stall the others; this call's stream window is given back only as its consumer takes the
messages (``_held`` → ``_release``). A consumer that stops reading therefore stops its own stream
after one stream window (backpressure, bounded memory per call), never the connection. Bytes of an
incomplete message are given back at once (nothing for the consumer to take yet): otherwise a
message larger than the window could never complete.

The call knows its connection only as a ``CallOwner``, the two things it asks of it, so this module
imports nothing of the connection's (``h2conn.py`` imports this one, and not the other way).
"""

from __future__ import annotations

import struct
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from gateway.backend.transport.base import (
    INTERNAL,
    OK,
    PERMISSION_DENIED,
    RESOURCE_EXHAUSTED,
    UNAUTHENTICATED,
    UNAVAILABLE,
    UNIMPLEMENTED,
    UNKNOWN,
    BatchedCall,
    CallError,
)
from gateway.backend.transport.h2frames import FLOW_CONTROL_ERROR

T = TypeVar("T")

_PREFIX = struct.Struct(">BI").unpack_from
"""A message's 5-byte prefix: (compressed flag, length)."""

HTTP_TO_GRPC_STATUS = {
    b"400": INTERNAL,
    b"401": UNAUTHENTICATED,
    b"403": PERMISSION_DENIED,
    b"404": UNIMPLEMENTED,
    b"429": UNAVAILABLE,
    b"502": UNAVAILABLE,
    b"503": UNAVAILABLE,
    b"504": UNAVAILABLE,
}
"""gRPC's mapping for a response whose HTTP status is not 200 and that carries no grpc-status
(doc/http-grpc-status-mapping.md in grpc/grpc); any other status is UNKNOWN."""


class CallOwner(Protocol):
    """What a call asks of the connection it runs on (``h2conn.GrpcConnection``)."""

    def release(self, call: StreamCall[Any], increment: int) -> None:
        """Give ``increment`` bytes back to the call's stream window (a WINDOW_UPDATE, sent now)."""

    def cancel(self, call: StreamCall[Any]) -> None:
        """Stop tracking the call and reset its stream (RST_STREAM CANCEL), unless it has ended."""

    def reset(self, call: StreamCall[Any], code: int) -> None:
        """``cancel`` with another RST_STREAM error code (a stream error, RFC 9113 §5.4.2)."""


class StreamCall(BatchedCall[T]):
    """One call on a ``GrpcConnection``: DATA payloads in, parsed messages out in batches
    (``BatchedCall``), its stream's receive window given back as the consumer takes them.

    The connection feeds it through ``receive_data``, ``receive_headers``, ``stream_ended`` and
    ``fail``; the consumer reads it as a ``base.StreamCall``."""

    __slots__ = (
        "stream_id",
        "_owner",
        "_parse",
        "_max",
        "_window",
        "_release_at",
        "_parts",
        "_head",
        "_need",
        "_held",
        "_unacked",
        "_status",
    )

    def __init__(
        self, owner: CallOwner, parse: Callable[[bytes], T], max_message_bytes: int, stream_window: int
    ) -> None:
        super().__init__()
        self.stream_id = 0
        self._owner = owner
        self._parse = parse
        self._max = max_message_bytes
        self._window = stream_window
        self._release_at = stream_window // 2
        """Bytes are given back once this many have gathered: one WINDOW_UPDATE per half window, and a
        server whose messages are taken as fast as they come never runs out of window."""
        self._parts: list[bytes | memoryview] | None = None
        """The pieces of a message still arriving (None when there is none; see ``_gather``)."""
        self._head = b""
        self._need = -1
        self._held = 0
        """Flow-controlled bytes of messages the consumer has not taken yet."""
        self._unacked = 0
        """Bytes taken (or not holdable) but not yet given back in a stream WINDOW_UPDATE."""
        self._status: int | None = None

    # -- the connection's side ----------------------------------------------------------------

    def receive_data(self, data: bytes | memoryview, length: int) -> None:
        """A DATA frame's payload (``length``: its flow-controlled size, padding included); a
        view for a large frame, kept as it is only while a message is gathered."""
        if self._done:
            return
        if self._held + self._unacked + length > self._window:
            # Past the window this call has not given back: the server broke flow control on
            # this stream, and a consumer that stopped reading would otherwise hold without bound.
            why = f"it sent past the stream's flow-control window of {self._window} bytes"
            self._finish(CallError(UNAVAILABLE, f"HTTP/2 protocol error from the server: {why}"))
            self._owner.reset(self, FLOW_CONTROL_ERROR)
            return
        end, size = 0, len(data)
        try:
            if self._parts is not None:
                end = self._gather(data)
                if end < 0:  # the message goes on in the next frames: nothing to hold for the consumer
                    self._release(length)
                    return
            if type(data) is memoryview:
                data = data.tobytes()
            while size - end >= 5:
                compressed, length_field = _PREFIX(data, end)
                start = end + 5
                if size < start + length_field:
                    break
                if compressed:
                    raise CallError(INTERNAL, "compressed gRPC message, but no compression was negotiated")
                if length_field > self._max:
                    raise self._too_large(length_field)
                end = start + length_field
                self._items.append(self._parse(data[start:end]))
            if end < size:  # the start of a message that goes on in the next frames
                self._parts, self._head, self._need = [], b"", -1
                self._gather(data[end:] if end else data)
        except Exception as exc:  # noqa: BLE001 - a parse failure or an in-stream error ends this call only
            self._parts = None
            self._finish(exc)
            self._owner.cancel(self)
            return
        if self._items:
            self._held += length
            self._wake()
        else:
            self._release(length)

    def _gather(self, data: bytes | memoryview) -> int:
        """Add ``data`` to the message being gathered: its 5-byte prefix in ``_head`` until
        complete (``_need`` < 0), then its bytes in ``_parts`` (``_need``: how many are missing).
        Once it is whole it is joined (one copy) and parsed; returns where it ended in ``data``,
        or -1 while it is still incomplete."""
        parts = self._parts
        assert parts is not None
        pos = 0
        if self._need < 0:
            head = self._head + data[: 5 - len(self._head)]
            pos = len(head) - len(self._head)
            if len(head) < 5:
                self._head = head
                return -1
            self._head = b""
            if head[0]:
                raise CallError(INTERNAL, "compressed gRPC message, but no compression was negotiated")
            size = int.from_bytes(head[1:5], "big")
            if size > self._max:
                raise self._too_large(size)
            self._need = size
        missing, available = self._need, len(data) - pos
        if available < missing:
            if available:
                parts.append(data[pos:] if pos else data)
            self._need = missing - available
            return -1
        parts.append(data[pos : pos + missing])
        self._parts = None
        self._items.append(self._parse(b"".join(parts)))  # a lone bytes part is not copied
        return pos + missing

    def _too_large(self, size: int) -> CallError:
        return CallError(
            RESOURCE_EXHAUSTED,
            f"a response message of {size} bytes is larger than the limit of {self._max} bytes "
            "(setting grpc_max_message_bytes)",
        )

    def receive_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Response headers, trailers, or a trailers-only response: look for the gRPC status."""
        status: int | None = None
        http_status = b"200"
        message = ""
        for name, value in headers:
            if name == b"grpc-status":
                status = int(value) if value.isdigit() else UNKNOWN
            elif name == b"grpc-message":
                message = urllib.parse.unquote(value.decode("utf-8", "replace"))
            elif name == b":status":
                http_status = value
        if status is None and http_status != b"200":
            # Not a gRPC response (a proxy's error page): its body is not gRPC messages.
            status = HTTP_TO_GRPC_STATUS.get(http_status, UNKNOWN)
            self._finish(CallError(status, f"HTTP status {http_status.decode('latin-1')} from the server"))
            self._owner.cancel(self)
            return
        if status is None:
            return
        self._status = status
        if status != OK and self._error is None:
            self._error = CallError(status, message or f"gRPC status {status}")

    def stream_ended(self) -> None:
        """The server ended the stream: the call ends with the status its trailers gave."""
        if self._status is None:
            self._finish(CallError(INTERNAL, "the stream ended without a gRPC status"))
        else:
            self._finish(self._error)

    def fail(self, error: BaseException) -> None:
        """The stream is gone without trailers (reset, GOAWAY, a lost connection): end with ``error``."""
        self._finish(error)

    def _release(self, length: int) -> None:
        """This call is done with ``length`` bytes: give them back to its stream's window, in one
        WINDOW_UPDATE per half window (none once the call has ended)."""
        unacked = self._unacked + length
        if unacked < self._release_at:
            self._unacked = unacked
            return
        self._unacked = 0
        if not self._done:
            self._owner.release(self, unacked)

    # -- the consumer's side ------------------------------------------------------------------

    def abort(self, error: BaseException) -> None:
        """End the call now with ``error`` for the consumer (deadline, shutdown) and tell Triton."""
        if not self._done:
            self._items.clear()
            self._finish(error)
        self._owner.cancel(self)

    def cancel(self) -> None:
        """Stop the call (the consumer left or has what it needs); nothing more is delivered."""
        self._done = True
        self._items.clear()
        self._owner.cancel(self)

    def _taken(self) -> None:
        held = self._held
        if held:
            self._held = 0
            unacked = self._unacked + held  # ``_release``, inline: this runs per token
            if unacked < self._release_at:
                self._unacked = unacked
            else:
                self._release(held)
