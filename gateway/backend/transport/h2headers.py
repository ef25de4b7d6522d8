"""HPACK on the gateway's HTTP/2 connections: each call's request headers, and the blocks that
repeat on every call, encoded and decoded once per connection instead of once per call.

Every call on a connection sends the same seven headers (method, scheme, path, authority,
content type, ``te``, user agent), and the client's HPACK encoder encodes nothing else. After the
first call they are all in the dynamic table, and from then on every block is the same bytes:
seven index references. hpack is pure Python (Huffman coding included), so encoding them again
cost 20-60 µs of every request's path to Triton on this machine (profiled in one process;
hpack's own encode timed at 29-62 µs). The cached block is reused only while it provably
means the same thing: the same headers, and a dynamic table that no encode has changed since (a
table-size change from the server's SETTINGS marks the table resized, and the next block is
encoded in full, with the size update it must carry).

Triton's side repeats too: after the first call, its response headers and its OK trailers are
each the same few index references, and ``RepeatingHeadersDecoder`` answers them from the last
decode of the same bytes while the dynamic table is the one that decode left.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import hpack

USER_AGENT = b"triton-openai-gateway"


def call_headers(scheme: bytes, authority: bytes, path: bytes) -> list[tuple[bytes, bytes]]:
    """A gRPC call's request headers, pseudo-headers first (HTTP/2 requires it)."""
    return [
        (b":method", b"POST"),
        (b":scheme", scheme),
        (b":path", path),
        (b":authority", authority),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        (b"user-agent", USER_AGENT),
    ]


def literal_headers(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """HPACK "literal header field without indexing — new name" representations (RFC 7541
    §6.2.2), no Huffman: a call's own headers (its ``traceparent``), different on every call, so
    indexing them would only churn the dynamic table and spoil the cached block they follow.
    Appended to a block, they leave the encoder's table and its cache exactly as they were."""
    out = bytearray()
    for name, value in headers:
        out.append(0x00)
        out += _string(name)
        out += _string(value)
    return bytes(out)


def _string(value: bytes) -> bytes:
    """An HPACK string literal, H bit clear: the length as a 7-bit-prefix integer (§5.1), then the octets."""
    length = len(value)
    if length < 0x7F:
        return bytes((length,)) + value
    prefix, length = bytearray((0x7F,)), length - 0x7F
    while length >= 0x80:
        prefix.append((length & 0x7F) | 0x80)
        length >>= 7
    prefix.append(length)
    return bytes(prefix) + value


class RepeatingHeadersEncoder(hpack.Encoder):
    """An ``hpack.Encoder`` that returns its last block again for the same headers when the
    dynamic table has not changed since that block was made without changing it.

    The table is compared entry by entry (``dynamic_entries``, hpack's public deque): a block of
    index references means the same headers exactly as long as the entries it points at are the
    same. A size change from the server's SETTINGS also sets ``resized``, and the next block must
    then carry the size update: it is encoded in full."""

    def __init__(self) -> None:
        super().__init__()
        self._headers: tuple[Any, ...] | None = None
        self._block = b""
        self._entries: deque[tuple[bytes, bytes]] = deque()
        """The dynamic table's entries when ``_block`` was made."""

    def encode(self, headers: Iterable[Any], huffman: bool = True) -> bytes:
        headers = tuple(headers)
        table = self.header_table
        if headers == self._headers and not table.resized and table.dynamic_entries == self._entries:
            return self._block
        before = table.dynamic_entries.copy()
        resized = table.resized
        block = super().encode(headers, huffman)
        if not resized and table.dynamic_entries == before:
            # Only references to what the table already held: the same bytes will mean the same
            # headers as long as the table stays as it is.
            self._headers, self._block, self._entries = headers, block, before
        else:
            self._headers = None
        return block


Headers = list[tuple[bytes, bytes]]


MAX_HEADER_LIST = 64 * 1024
"""The response header list size the client takes (SETTINGS_MAX_HEADER_LIST_SIZE: names, values
and 32 bytes per field, RFC 9113 §6.5.2): a long ``grpc-message`` fits many times over."""


class HeaderListTooLargeError(Exception):
    """A block decoded whole (the dynamic table is still the server's) whose header list is over
    the limit: its stream ends, and the connection goes on."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"response headers of {size} bytes, over the client's limit of {limit}")


class RepeatingHeadersDecoder(hpack.Decoder):
    """An ``hpack.Decoder`` that answers a block it decoded last time from that decode, when the
    block left the dynamic table as it found it and no other block has changed the table since.
    Every block is still decoded unless that holds, so the table stays the server's.

    Two bounds on a block's header list: over ``limit`` it is still decoded whole and raises
    ``HeaderListTooLargeError`` (one stream's fault); over four times that, hpack stops mid-block
    (an HPACK bomb: a few bytes that refer to a large table entry again and again), which leaves
    the table unknown and so must end the connection."""

    def __init__(self, limit: int = MAX_HEADER_LIST) -> None:
        super().__init__(max_header_list_size=4 * limit)
        self.limit = limit
        self._version = 0
        """Bumped by every decode that changed the dynamic table."""
        self._cache: dict[bytes, tuple[int, Headers]] = {}

    def decode_block(self, block: bytes) -> Headers:
        """The block's headers, as bytes."""
        cached = self._cache.get(block)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        table = self.header_table
        before = (list(table.dynamic_entries), table.maxsize)
        headers: Headers = [(bytes(name), bytes(value)) for name, value in self.decode(block, raw=True)]
        size = sum(len(name) + len(value) for name, value in headers) + 32 * len(headers)
        if size > self.limit:  # after the table is updated; never cached
            self._version += 1
            raise HeaderListTooLargeError(size, self.limit)
        if (list(table.dynamic_entries), table.maxsize) == before:
            if len(self._cache) >= 16:
                self._cache.clear()
            self._cache[block] = (self._version, headers)
        else:
            self._version += 1
        return headers
