"""The gateway's HTTP/2 client against a hostile or broken server: frames on streams that ended or
never existed, flow-control abuse both ways, oversized and truncated header blocks, HPACK abuse,
resets mid-message, odd GOAWAYs, floods, and a server that goes silent.

Each case ends the affected calls with a typed ``CallError`` (retryable only when the server
provably never started the call), within a bounded wait, leaves no stream tracked, and keeps the
other calls on the connection going when only one stream is at fault (RFC 9113 §5.4: a stream
error resets that stream; a connection error ends the connection with a GOAWAY that says why).
Exact frame sequences are fed in memory (``MemoryPeer``); what needs a real socket runs against
the h2 library's server on loopback. Cases at the gRPC level run through both transports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import h2.errors
import pytest
from hpack.hpack import encode_integer
from hyperframe.frame import (
    ContinuationFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from gateway.backend.transport import base as grpc_status
from gateway.backend.transport import h2conn
from gateway.backend.transport.aio import AioTransport
from gateway.backend.transport.base import CallError, StreamCall, StreamTransport
from gateway.backend.transport.h2 import H2Transport, Keepalive
from gateway.backend.transport.h2frames import (
    CANCEL,
    COMPRESSION_ERROR,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    PROTOCOL_ERROR,
)
from tests.unit.h2_peer import (
    PATH,
    MemoryPeer,
    Peer,
    Server,
    assert_clean,
    collect,
    data,
    grpc_message,
    serve,
    until,
)

pytestmark = pytest.mark.anyio

WAIT = 10.0
"""Every wait is bounded by this: generous, so a busy machine cannot fail a test by being slow."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def raw(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    """A frame as bytes, whatever it says (hyperframe refuses some that a hostile server sends)."""
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload


async def failure(call: StreamCall[Any]) -> CallError:
    """The error the call ends with, within ``WAIT``."""
    with pytest.raises(CallError) as caught:
        await asyncio.wait_for(collect(call), WAIT)
    return caught.value


async def memory_calls(peer: MemoryPeer, count: int = 2, message: bytes = b"x") -> list[StreamCall[bytes]]:
    """``count`` calls (streams 1, 3, ...), each with its response headers in."""
    calls = [await peer.connection.open(PATH, message, bytes) for _ in range(count)]
    peer.feed(*(peer.respond(call.stream_id) for call in calls))  # type: ignore[attr-defined]
    return calls  # type: ignore[return-value]


async def finishes(peer: MemoryPeer, call: StreamCall[Any], message: bytes = b"fine") -> None:
    """The call is still served: a message and OK trailers reach its consumer."""
    sid = call.stream_id  # type: ignore[attr-defined]
    peer.feed(data(sid, grpc_message(message)), peer.trailers(sid))
    assert await asyncio.wait_for(collect(call), WAIT) == [message]


async def connection_error(peer: MemoryPeer, calls: list[StreamCall[Any]], code: int, words: str) -> list[CallError]:
    """Every call failed as UNAVAILABLE, the server got a GOAWAY with ``code``, nothing is left."""
    errors = [await failure(call) for call in calls]
    for error in errors:
        assert error.code == grpc_status.UNAVAILABLE and words in error.details, error.details
    goaway = peer.goaway()
    assert goaway is not None and goaway[0] == code, goaway
    assert peer.wire.closing and not peer.connection.usable
    assert_clean(peer.connection)
    return errors


# -- frames on streams that ended or never existed ------------------------------------------------


async def test_frames_on_a_stream_that_ended_are_dropped_and_the_other_calls_go_on() -> None:
    peer = MemoryPeer()
    ended, other = await memory_calls(peer)
    await finishes(peer, ended, b"done")
    sid = ended.stream_id  # type: ignore[attr-defined]
    peer.feed(
        data(sid, grpc_message(b"late")),
        peer.headers(sid, [(b"grpc-status", b"13"), (b"x-late", b"indexed")], "END_STREAM"),
        RstStreamFrame(sid, error_code=2).serialize(),
        WindowUpdateFrame(sid, window_increment=1000).serialize(),
        raw(WindowUpdateFrame.type, 0, sid, b"\x00\x00\x00\x00"),
    )
    assert peer.goaway() is None and peer.connection.usable
    # The late block's table entry was kept: this block refers to it.
    other_sid = other.stream_id  # type: ignore[attr-defined]
    peer.feed(data(other_sid, grpc_message(b"fine")), peer.headers(other_sid, [(b"x-late", b"indexed")]))
    peer.feed(peer.trailers(other_sid))
    assert await asyncio.wait_for(collect(other), WAIT) == [b"fine"]
    assert_clean(peer.connection)


@pytest.mark.parametrize("kind", ["DATA", "HEADERS", "RST_STREAM", "WINDOW_UPDATE", "CONTINUATION"])
@pytest.mark.parametrize("sid", [41, 2, 0])
async def test_a_frame_on_a_stream_the_client_never_opened_ends_the_connection(kind: str, sid: int) -> None:
    if kind == "WINDOW_UPDATE" and sid == 0:
        pytest.skip("stream 0 is the connection's window")
    peer = MemoryPeer()
    calls = await memory_calls(peer)
    frames = {
        "DATA": raw(0, 0, sid, grpc_message(b"z")),
        "HEADERS": raw(1, 0x4, sid, peer.encoder.encode([(b":status", b"200")])),
        "RST_STREAM": raw(3, 0, sid, (2).to_bytes(4, "big")),
        "WINDOW_UPDATE": raw(8, 0, sid, (100).to_bytes(4, "big")),
        "CONTINUATION": raw(9, 0x4, sid, b"\x88"),
    }
    peer.feed(frames[kind])
    await connection_error(peer, calls, PROTOCOL_ERROR, "HTTP/2 protocol error")


# -- flow control -------------------------------------------------------------------------------


async def test_data_beyond_a_streams_window_resets_that_stream_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer that stops reading holds its stream's window; a server that sends past it has
    broken flow control on that stream: it is reset (FLOW_CONTROL_ERROR) before the call can hold
    more than the window, and the other calls go on."""
    monkeypatch.setattr(h2conn, "_STREAM_WINDOW", 65_536)
    peer = MemoryPeer()
    greedy, exact = await memory_calls(peer)
    quarter = grpc_message(b"q" * (16_384 - 5))
    peer.feed(*(data(exact.stream_id, quarter) for _ in range(4)))  # type: ignore[attr-defined]
    assert await anext(exact) == [b"q" * 16_379] * 4  # the whole window, exactly: allowed
    chunk = grpc_message(b"z" * 13_995)  # 14,000 bytes
    peer.feed(*(data(greedy.stream_id, chunk) for _ in range(5)))  # type: ignore[attr-defined]
    error = await failure(greedy)
    assert error.code == grpc_status.UNAVAILABLE and "flow-control window" in error.details
    assert peer.resets()[greedy.stream_id] == FLOW_CONTROL_ERROR  # type: ignore[attr-defined]
    assert peer.goaway() is None
    await finishes(peer, exact)
    assert_clean(peer.connection)


async def test_data_beyond_the_connections_window_ends_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(h2conn, "_CONNECTION_WINDOW", 131_072)
    peer = MemoryPeer()
    calls = await memory_calls(peer, message=b"big")
    start = b"\x00" + (1 << 20).to_bytes(4, "big")  # a 1 MiB message: its pieces are not held
    piece = b"p" * 16_384
    peer.feed(data(1, start + piece[5:]), *(data(1, piece) for _ in range(8)))  # 147,456 bytes in one read
    await connection_error(peer, calls, FLOW_CONTROL_ERROR, "flow-control window")


async def _queued(peer: MemoryPeer) -> tuple[StreamCall[bytes], StreamCall[bytes]]:
    """A call whose request waits for send window (stream 1: 100 kB against the default 65,535),
    and one whose request is all sent (stream 3, sent once the connection window reopens)."""
    queued = await peer.connection.open(PATH, b"q" * 100_000, bytes)
    sent = await peer.connection.open(PATH, b"x", bytes)
    peer.feed(WindowUpdateFrame(0, window_increment=1_000).serialize())
    assert 1 in peer.connection._unsent and 3 not in peer.connection._unsent
    peer.feed(peer.respond(3))
    return queued, sent


@pytest.mark.parametrize(
    ("increments", "code", "words"),
    [([2**31 - 1, 2**31 - 1], FLOW_CONTROL_ERROR, "overflowed"), ([0], PROTOCOL_ERROR, "WINDOW_UPDATE of 0")],
)
async def test_a_bad_window_update_on_a_stream_resets_that_stream_as_retryable(
    increments: list[int], code: int, words: str
) -> None:
    """RFC 9113 §6.9: an increment of 0 on a stream is a stream error (PROTOCOL_ERROR), one that
    overflows the stream's window another (FLOW_CONTROL_ERROR; the first increment opens it to
    2^31-1, of which the connection's window lets a few hundred bytes go). The request never
    fully left, so the call is retryable."""
    peer = MemoryPeer()
    queued, sent = await _queued(peer)
    peer.feed(*(raw(8, 0, 1, increment.to_bytes(4, "big")) for increment in increments))
    error = await failure(queued)
    assert error.code == grpc_status.UNAVAILABLE and words in error.details and error.retryable
    assert peer.resets()[1] == code and peer.goaway() is None
    await finishes(peer, sent)
    assert_clean(peer.connection)


async def test_a_window_update_of_0_on_a_stream_whose_request_was_sent_resets_it() -> None:
    peer = MemoryPeer()
    zero, other = await memory_calls(peer)
    peer.feed(raw(8, 0, zero.stream_id, b"\x00\x00\x00\x00"))  # type: ignore[attr-defined]
    error = await failure(zero)
    assert "WINDOW_UPDATE of 0" in error.details and not error.retryable
    assert peer.resets()[zero.stream_id] == PROTOCOL_ERROR  # type: ignore[attr-defined]
    await finishes(peer, other)
    assert_clean(peer.connection)


@pytest.mark.parametrize(
    ("frames", "code", "words"),
    [
        ([raw(8, 0, 0, b"\x00\x00\x00\x00")], PROTOCOL_ERROR, "WINDOW_UPDATE of 0"),
        ([raw(8, 0, 0, (2**31 - 1).to_bytes(4, "big"))], FLOW_CONTROL_ERROR, "overflowed"),
        (  # a new initial window that takes an open stream's window past 2^31-1 (RFC 9113 §6.9.2)
            [raw(8, 0, 1, (2**31 - 1).to_bytes(4, "big")), SettingsFrame(0, {4: 75_535}).serialize()],
            FLOW_CONTROL_ERROR,
            "overflow",
        ),
    ],
)
async def test_a_connection_window_overflow_or_zero_update_ends_the_connection(
    frames: list[bytes], code: int, words: str
) -> None:
    peer = MemoryPeer()
    calls = list(await _queued(peer))
    peer.feed(*frames)
    errors = await connection_error(peer, calls, code, words)
    assert [error.retryable for error in errors] == [True, False]  # the queued request never fully left


# -- header blocks --------------------------------------------------------------------------------


async def test_response_headers_over_the_clients_limit_end_that_call_only() -> None:
    """Over SETTINGS_MAX_HEADER_LIST_SIZE (which the client advertises) but decodable: the block
    is decoded whole, so the connection's HPACK state stays the server's; the call ends
    (RESOURCE_EXHAUSTED, as gRPC's clients do) and the others go on."""
    peer = MemoryPeer()
    big, other = await memory_calls(peer)
    sid = big.stream_id  # type: ignore[attr-defined]
    block = peer.encoder.encode([(b"grpc-status", b"2"), (b"x-big", b"b" * 100_000)])
    pieces = [block[at : at + 16_384] for at in range(0, len(block), 16_384)]
    peer.feed(
        HeadersFrame(sid, pieces[0]).serialize(),
        *(ContinuationFrame(sid, piece).serialize() for piece in pieces[1:-1]),
        ContinuationFrame(sid, pieces[-1], flags=["END_HEADERS"]).serialize(),
    )
    error = await failure(big)
    assert error.code == grpc_status.RESOURCE_EXHAUSTED and "header" in error.details
    assert peer.resets()[sid] == CANCEL and peer.goaway() is None
    await finishes(peer, other)
    assert_clean(peer.connection)


@pytest.mark.parametrize("piece", [b"h" * 16_384, b""], ids=["full", "empty"])
async def test_a_header_block_that_never_ends_is_cut_off_with_enhance_your_calm(piece: bytes) -> None:
    """CONTINUATION frames without END_HEADERS, full or empty: the block is not buffered past the
    client's bound (each frame counts its 9-byte head too, so empty ones cannot pile up)."""
    peer = MemoryPeer()
    calls = await memory_calls(peer)
    frames = [HeadersFrame(1, b"\x88").serialize()]
    frames += [ContinuationFrame(1, piece).serialize()] * (20 if piece else 40_000)
    peer.feed(*frames)
    await connection_error(peer, calls, ENHANCE_YOUR_CALM, "header block")


@pytest.mark.parametrize(
    "intruder",
    [
        PingFrame(0, b"12345678").serialize(),
        raw(1, 0x4, 3, b"\x88"),  # HEADERS on another stream
        ContinuationFrame(3, b"\x88", flags=["END_HEADERS"]).serialize(),
        raw(0, 0, 1, b""),  # DATA on the same stream
        raw(0x20, 0, 0, b"unknown"),  # a frame type this version does not know
        RstStreamFrame(1, error_code=0).serialize(),
    ],
    ids=["ping", "headers", "continuation-other-stream", "data", "unknown-type", "rst"],
)
async def test_a_header_block_interrupted_by_another_frame_ends_the_connection(intruder: bytes) -> None:
    peer = MemoryPeer()
    calls = await memory_calls(peer)
    peer.feed(HeadersFrame(1, b"\x88").serialize(), intruder)
    await connection_error(peer, calls, PROTOCOL_ERROR, "interrupted")


def _indexed_literal(name: bytes, value: bytes) -> bytes:
    """HPACK: a literal with incremental indexing, new name, no Huffman (RFC 7541 §6.2.1)."""
    return b"\x40" + bytes(encode_integer(len(name), 7)) + name + bytes(encode_integer(len(value), 7)) + value


@pytest.mark.parametrize(
    "block",
    [
        b"\x3f\xe1\x3f",  # a dynamic table size update to 8,192: above the 4,096 the client allows
        b"\x88\x3f\xe1\x1f",  # a size update after a header
        b"\xff" + bytes(encode_integer(200, 7))[1:],  # index 200: beyond the static and dynamic tables
        b"\xff\x81\xff\xff\xff\xff\x1f",  # index 2^40
        b"\xff" + b"\xff" * 20 + b"\x01",  # an integer longer than any implementation's
        _indexed_literal(b"x-bomb", b"b" * 4_000) + b"\xbe" * 1_000,  # 4 kB referenced 1,000 times
    ],
    ids=["table-size-above-max", "size-update-late", "index-200", "index-2**40", "endless-integer", "bomb"],
)
async def test_hpack_abuse_ends_the_connection_with_compression_error(block: bytes) -> None:
    """A block that cannot be decoded whole leaves the dynamic table unknown: every later block
    could mean anything, so the connection ends (RFC 9113 §4.3). The bomb is stopped at the
    decoder's hard bound, not decoded to its 4 MB."""
    peer = MemoryPeer()
    calls = await memory_calls(peer)
    peer.feed(HeadersFrame(1, block, flags=["END_HEADERS"]).serialize())
    await connection_error(peer, calls, COMPRESSION_ERROR, "header block")


async def test_a_small_hpack_bomb_ends_its_call_and_keeps_the_table() -> None:
    peer = MemoryPeer()
    bomb, other = await memory_calls(peer)
    block = _indexed_literal(b"x-bomb", b"b" * 4_000) + b"\xbe" * 20  # 84 kB decoded: over the limit
    peer.feed(HeadersFrame(1, block, flags=["END_HEADERS"]).serialize())
    error = await failure(bomb)
    assert error.code == grpc_status.RESOURCE_EXHAUSTED
    peer.feed(data(3, grpc_message(b"fine")), HeadersFrame(3, b"\xbe\x88", flags=["END_HEADERS"]).serialize())
    peer.feed(peer.trailers(3))  # the entry the bomb added is still index 62, as on the server
    assert await asyncio.wait_for(collect(other), WAIT) == [b"fine"]
    assert_clean(peer.connection)


# -- resets mid-message ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "retryable"),
    [
        (h2.errors.ErrorCodes.INTERNAL_ERROR, grpc_status.INTERNAL, False),
        (h2.errors.ErrorCodes.NO_ERROR, grpc_status.INTERNAL, False),
        (h2.errors.ErrorCodes.PROTOCOL_ERROR, grpc_status.INTERNAL, False),
        (h2.errors.ErrorCodes.CANCEL, grpc_status.CANCELLED, False),
        (h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, grpc_status.RESOURCE_EXHAUSTED, False),
        (h2.errors.ErrorCodes.INADEQUATE_SECURITY, grpc_status.PERMISSION_DENIED, False),
        (h2.errors.ErrorCodes.REFUSED_STREAM, grpc_status.UNAVAILABLE, True),
        (0x99, grpc_status.INTERNAL, False),
    ],
)
async def test_a_reset_mid_message_maps_as_grpc_maps_it_and_spares_the_other_calls(
    code: int, status: int, retryable: bool
) -> None:
    """The status for each RST_STREAM code is gRPC's own table (doc/PROTOCOL-HTTP2.md, "Errors"),
    so a call ends with the same status on either transport."""
    peer = MemoryPeer()
    reset, other = await memory_calls(peer)
    peer.feed(data(1, grpc_message(b"whole")), data(1, grpc_message(b"half")[:6]))
    assert await anext(reset) == [b"whole"]
    peer.feed(RstStreamFrame(1, error_code=code).serialize())
    error = await failure(reset)
    assert (error.code, error.retryable) == (status, retryable), error.details
    assert reset.stream_id not in peer.resets()  # type: ignore[attr-defined]  # never reset back
    if code != h2.errors.ErrorCodes.REFUSED_STREAM:  # a refusal retires the connection; its calls go on
        assert peer.connection.usable
    await finishes(peer, other)
    assert_clean(peer.connection)


# -- GOAWAY with odd last stream ids ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("last", "served"),
    [(2**31 - 1, {1, 3}), (101, {1, 3}), (2, {1}), (0, set())],
    ids=["max", "never-opened", "even", "zero"],
)
async def test_a_graceful_goaway_serves_the_calls_up_to_its_last_id_and_the_rest_are_retryable(
    last: int, served: set[int]
) -> None:
    peer = MemoryPeer()
    calls = await memory_calls(peer)
    peer.feed(raw(7, 0, 0, last.to_bytes(4, "big") + b"\x00\x00\x00\x00"))
    assert not peer.connection.usable
    for call in calls:
        if call.stream_id in served:  # type: ignore[attr-defined]
            await finishes(peer, call)
        else:
            error = await failure(call)
            assert error.code == grpc_status.UNAVAILABLE and error.retryable
    await until(lambda: peer.wire.closing, WAIT)  # closed once its last call ended
    assert_clean(peer.connection)


async def test_a_second_goaway_with_a_higher_last_id_brings_back_nothing() -> None:
    peer = MemoryPeer()
    first, second = await memory_calls(peer)
    peer.feed(raw(7, 0, 0, (1).to_bytes(4, "big") + b"\x00\x00\x00\x00"))
    error = await failure(second)
    assert error.retryable
    peer.feed(raw(7, 0, 0, (2**31 - 1).to_bytes(4, "big") + b"\x00\x00\x00\x00"))  # RFC 9113 forbids this
    peer.feed(data(3, grpc_message(b"ghost")), peer.trailers(3))  # dropped: the call is over
    await finishes(peer, first)
    await until(lambda: peer.wire.closing, WAIT)
    assert peer.goaway() == (0, b"")  # the client's own, on closing: no protocol error
    assert_clean(peer.connection)


async def test_an_error_goaway_above_every_stream_still_fails_every_call() -> None:
    peer = MemoryPeer()
    calls = await memory_calls(peer)
    peer.feed(raw(7, 0, 0, (2**31 - 1).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"oops"))
    for call in calls:
        error = await failure(call)
        assert error.code == grpc_status.UNAVAILABLE and "INTERNAL_ERROR" in error.details and not error.retryable
    assert peer.wire.closing
    assert_clean(peer.connection)


# -- floods -----------------------------------------------------------------------------------------

FLOOD = 20_000


@pytest.mark.parametrize("kind", ["PING", "SETTINGS"])
async def test_a_flood_a_server_reads_the_answers_to_is_served(kind: str) -> None:
    """Every PING and SETTINGS is answered (RFC 9113 requires it) while the server reads what the
    client writes: answering costs the client a few bytes each, and memory does not grow."""
    peer = MemoryPeer()
    (call,) = await memory_calls(peer, 1)
    flood = PingFrame(0, b"flooding").serialize() if kind == "PING" else SettingsFrame(0).serialize()
    peer.feed(flood * FLOOD)
    acks = [f for f in peer.sent() if f[0] == (6 if kind == "PING" else 4) and f[1] & 1]
    assert len(acks) == FLOOD and peer.goaway() is None
    await finishes(peer, call)


@pytest.mark.parametrize("kind", ["PING", "SETTINGS"])
async def test_a_flood_whose_answers_the_server_does_not_read_ends_with_enhance_your_calm(kind: str) -> None:
    """Once the client's writes back up (asyncio's ``pause_writing``), the answers it queues are
    counted; past ``_MAX_QUEUED_CONTROL`` the server is flooding without reading and the
    connection is aborted (nothing more is queued for a peer that does not read)."""
    peer = MemoryPeer()
    calls = await memory_calls(peer)
    peer.connection.pause_writing()
    flood = PingFrame(0, b"flooding").serialize() if kind == "PING" else SettingsFrame(0).serialize()
    peer.feed(flood * FLOOD)
    acks = [f for f in peer.sent() if f[0] in (4, 6) and f[1] & 1]
    assert len(acks) <= h2conn._MAX_QUEUED_CONTROL + 1
    await connection_error(peer, calls, ENHANCE_YOUR_CALM, "flood")
    assert peer.wire.aborted


async def test_answers_queued_between_write_pauses_do_not_add_up() -> None:
    peer = MemoryPeer()
    (call,) = await memory_calls(peer, 1)
    ping = PingFrame(0, b"flooding").serialize()
    for _ in range(3):  # each pause sees fewer than the bound
        peer.connection.pause_writing()
        peer.feed(ping * (h2conn._MAX_QUEUED_CONTROL // 2))
        peer.connection.resume_writing()
    assert peer.goaway() is None
    await finishes(peer, call)


async def test_a_ping_flood_over_a_socket_is_answered_and_the_call_goes_on() -> None:
    flooded = asyncio.Event()

    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        for i in range(5_000):
            peer.h2.ping(i.to_bytes(8, "big"))
        peer.flush()
        await peer.wait_ping_ack(5_000)
        flooded.set()
        peer.send(sid, grpc_message(b"after"))
        peer.trailers(sid)

    async with serve(script) as (connection, peers):
        assert await asyncio.wait_for(collect(await connection.open(PATH, b"x", bytes)), WAIT) == [b"after"]
        assert flooded.is_set() and peers[0].goaways == []
        assert_clean(connection)


# -- the same scenarios through both transports (gRPC level) ---------------------------------------


class _Muting(Peer):
    """A peer that can go silent: once ``mute`` is set it reads nothing and answers nothing
    (not even PINGs), as a hung server or a half-open TCP connection does."""

    mute = False

    def data_received(self, data: bytes) -> None:
        if not self.mute:
            super().data_received(data)


@asynccontextmanager
async def seam(
    kind: str, script: Any, *, max_message_bytes: int = 4096, keepalive: tuple[float, float] | None = None
) -> AsyncIterator[tuple[StreamTransport, Server]]:
    """A ``StreamTransport`` of ``kind`` ("h2" or "aio") to an h2 server peer running ``script``."""
    server = Server(script, peer=_Muting)
    target = await server.start()
    if kind == "h2":
        transport = H2Transport(
            target, max_message_bytes=max_message_bytes, keepalive=Keepalive(*keepalive) if keepalive else None
        )
        try:
            yield transport, server
        finally:
            await transport.close()
            server.close()
        return
    options: list[tuple[str, Any]] = [
        ("grpc.enable_retries", 0),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]
    if keepalive:
        options += [
            ("grpc.keepalive_time_ms", int(keepalive[0] * 1000)),
            ("grpc.keepalive_timeout_ms", int(keepalive[1] * 1000)),
            ("grpc.http2.max_pings_without_data", 0),
            # gRPC defers a keepalive PING while another PING (its BDP probe, sent as data arrives) is
            # unanswered, and that one times out after this (a minute by default).
            ("grpc.http2.ping_timeout_ms", int(keepalive[1] * 1000)),
        ]
    channel = grpc.aio.insecure_channel(target, options=options)
    aio = AioTransport(lambda: channel)
    try:
        yield aio, server
    finally:
        await aio.close()
        await channel.close(grace=None)
        server.close()


async def outcome(kind: str, call: StreamCall[Any]) -> CallError:
    """The call's messages and its error. Our client delivers the message that came whole before
    the fault; gRPC's may drop it when the fault ends the stream before its reader took it."""
    items: list[bytes] = []
    with pytest.raises(CallError) as caught:
        async with asyncio.timeout(WAIT):
            async for batch in call:
                items += batch
    assert items == [b"first"] or (kind == "aio" and items == []), items
    return caught.value


async def _no_stream_left(transport: StreamTransport) -> None:
    if isinstance(transport, H2Transport):
        assert transport._connection is not None
        assert_clean(transport._connection)
    else:
        assert isinstance(transport, AioTransport)
        await until(lambda: not transport._calls, WAIT)


async def _served_alongside(transport: StreamTransport) -> None:
    """Another call on the same transport (the same connection, for h2) is still served."""
    assert await asyncio.wait_for(collect(await transport.open(PATH, b"fine", bytes)), WAIT) == [b"fine-ok"]


async def _hostile(peer: Peer, sid: int, request: bytes, bad: bytes) -> None:
    peer.respond(sid)
    if request == b"fine":
        peer.send(sid, grpc_message(b"fine-ok"))
        peer.trailers(sid)
        return
    peer.send(sid, grpc_message(b"first"))
    peer.send(sid, bad)


TRANSPORTS = ["h2", "aio"]


@pytest.mark.parametrize("kind", TRANSPORTS)
@pytest.mark.parametrize(
    ("bad", "status", "words"),
    [
        (b"\x01" + (5).to_bytes(4, "big") + b"zzzzz", grpc_status.INTERNAL, "compress"),
        (b"\x00\xff\xff\xff\xff", grpc_status.RESOURCE_EXHAUSTED, ""),  # a 4 GiB length: only its prefix sent
        (grpc_message(b"m" * 5_000), grpc_status.RESOURCE_EXHAUSTED, ""),
    ],
    ids=["compressed-flag", "length-4GiB", "over-limit"],
)
async def test_a_bad_grpc_message_ends_its_call_only(kind: str, bad: bytes, status: int, words: str) -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        await _hostile(peer, sid, request, bad)

    async with seam(kind, script) as (transport, _):
        error = await outcome(kind, await transport.open(PATH, b"bad", bytes))
        assert error.code == status and words in error.details.lower(), error.details
        await _served_alongside(transport)
        await _no_stream_left(transport)


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_reset_mid_message_ends_that_call_as_internal_on_both_transports(kind: str) -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        await _hostile(peer, sid, request, grpc_message(b"cut short")[:7])
        if request != b"fine":
            peer.h2.reset_stream(sid, h2.errors.ErrorCodes.INTERNAL_ERROR)
            peer.flush()

    async with seam(kind, script) as (transport, _):
        error = await outcome(kind, await transport.open(PATH, b"reset", bytes))
        assert error.code == grpc_status.INTERNAL and not error.retryable, error.details
        await _served_alongside(transport)
        await _no_stream_left(transport)


@pytest.mark.parametrize("kind", TRANSPORTS)
@pytest.mark.parametrize("where", ["mid-headers", "mid-message"])
async def test_a_server_that_goes_silent_fails_the_call_by_keepalive(kind: str, where: str) -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        if where == "mid-headers":
            block = peer.h2.encoder.encode([(b":status", b"200"), (b"content-type", b"application/grpc")])
            peer.raw(HeadersFrame(sid, block).serialize())  # no END_HEADERS, and no CONTINUATION ever
        else:
            peer.respond(sid)
            peer.send(sid, grpc_message(b"first") + grpc_message(b"second")[:8])
        peer.mute = True  # type: ignore[attr-defined]

    async with seam(kind, script, keepalive=(0.2, 0.5)) as (transport, _):
        call = await transport.open(PATH, b"x", bytes)
        error = await failure(call)
        assert error.code == grpc_status.UNAVAILABLE and not error.retryable, error.details
        if isinstance(transport, H2Transport):
            assert "keepalive" in error.details
        await _no_stream_left(transport)


async def test_a_silent_call_on_a_live_connection_waits_for_its_deadline_and_leaves_nothing() -> None:
    """A server that answers PINGs but sends nothing more on a call is alive (a model can be
    slow): keepalive keeps the call, and the request's deadline (the backend's timer, which aborts
    the call) ends it."""
    pinged = asyncio.Event()

    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, grpc_message(b"first") + grpc_message(b"second")[:8])

    class _Counting(Peer):
        def data_received(self, data: bytes) -> None:
            if b"gwalive!" in data:
                pinged.set()
            super().data_received(data)

    async with serve(script, keepalive=Keepalive(0.05, 0.5), peer=_Counting) as (connection, peers):
        call = await connection.open(PATH, b"x", bytes)
        assert await asyncio.wait_for(anext(call), WAIT) == [b"first"]
        await asyncio.wait_for(pinged.wait(), WAIT)
        await until(lambda: peers[0].ping_acks == 0 and connection._ping_deadline is None, WAIT)
        assert connection.calls == 1 and connection.usable
        call.abort(TimeoutError("deadline"))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(call), WAIT)
        await until(lambda: call.stream_id in peers[0].resets, WAIT)  # type: ignore[attr-defined]
        assert_clean(connection)


async def test_a_caller_waiting_for_a_stream_slot_leaves_when_the_connection_fails() -> None:
    """Closing waits for the server to read what is queued, which a broken server may never do:
    a caller waiting for a slot is sent to another connection at once, not when the socket goes."""
    peer = MemoryPeer()
    peer.wire.close = lambda: setattr(peer.wire, "closing", True)  # type: ignore[method-assign]
    peer.feed(SettingsFrame(0, {3: 1}).serialize())  # one stream at a time
    (call,) = await memory_calls(peer, 1)
    waiting = asyncio.ensure_future(peer.connection.open(PATH, b"next", bytes))
    await asyncio.sleep(0)
    assert not waiting.done()
    peer.feed(raw(0, 0, 2, b"z"))  # a connection error
    with pytest.raises(CallError) as caught:
        await asyncio.wait_for(waiting, WAIT)
    assert caught.value.retryable
    assert (await failure(call)).code == grpc_status.UNAVAILABLE
    assert_clean(peer.connection)
