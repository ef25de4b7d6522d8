"""HTTP/2's wire vocabulary as the gateway's client speaks it (RFC 9113): frame types, flags,
error codes and settings, a frame's bytes, and the error a server that breaks the protocol raises.
The connection's rules are in ``h2conn.py``."""

from __future__ import annotations

import struct

# Frame types and flags (RFC 9113 §6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20

# Error codes (RFC 9113 §7).
ERROR_NAMES = (
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
)
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR = 0x0, 0x1, 0x3, 0x6
REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, ENHANCE_YOUR_CALM, INADEQUATE_SECURITY = 0x7, 0x8, 0x9, 0xB, 0xC

# Settings (RFC 9113 §6.5.2).
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 1, 2, 3, 4, 5
MAX_HEADER_LIST_SIZE = 6

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
DEFAULT_MAX_FRAME = 16_384
"""The largest frame either side may send until told otherwise; we never raise ours."""

FRAME_HEAD = struct.Struct(">IBI").unpack_from
"""A frame's 9-byte header as (length << 8 | type, flags, stream id with its reserved bit): one
call, a third of the cost of slicing and ``int.from_bytes`` per field on the per-token path."""


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame's bytes: the 9-byte header, then the payload."""
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream_id.to_bytes(4, "big") + payload


def error_name(code: int) -> str:
    return ERROR_NAMES[code] if code < len(ERROR_NAMES) else f"error code {code:#x}"


class ProtocolViolation(Exception):
    """The server broke the protocol: the connection ends, and ``code`` goes in our GOAWAY."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code
