"""The HTTP/2 rules the gateway's own client keeps, against a real h2 server peer: header blocks
in CONTINUATION frames, padded and prioritised HEADERS, the server's HPACK table and frame-size
settings, frames that cross a reset, and each violation a server could commit against a client,
which ends the connection with a GOAWAY that says why (RFC 9113)."""

from __future__ import annotations

import asyncio

import h2.errors
import h2.settings
import pytest
from hyperframe.frame import DataFrame, HeadersFrame, PushPromiseFrame, WindowUpdateFrame

from gateway.backend.transport import base as grpc_status
from gateway.backend.transport.h2 import CallError
from tests.unit.h2_peer import PATH, Peer, answer_length, collect, grpc_message, serve, until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_header_block_in_continuation_frames_is_read_whole() -> None:
    long_message = b"x" * 40_000  # h2 cuts the trailers' block into 16 KiB frames

    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, grpc_message(b"one"))
        peer.trailers(sid, status=3, message=long_message)

    async with serve(script) as (connection, _):
        call = await connection.open(PATH, b"x", bytes)
        assert await anext(call) == [b"one"]
        with pytest.raises(CallError) as caught:
            await anext(call)
        assert caught.value.code == 3 and caught.value.details == long_message.decode()
        assert connection.usable


async def test_padded_and_prioritised_headers_are_read() -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        block = peer.h2.encoder.encode([(b":status", b"200"), (b"grpc-status", b"7"), (b"grpc-message", b"denied")])
        flags = ["END_HEADERS", "END_STREAM", "PADDED", "PRIORITY"]
        peer.raw(HeadersFrame(sid, block, flags=flags, pad_length=6, depends_on=0, stream_weight=15).serialize())

    async with serve(script) as (connection, _):
        with pytest.raises(CallError) as caught:
            await asyncio.wait_for(collect(await connection.open(PATH, b"x", bytes)), 5)
        assert (caught.value.code, caught.value.details) == (7, "denied")
        assert connection.usable


async def test_the_servers_header_table_size_and_frame_size_are_followed() -> None:
    async with serve(answer_length) as (connection, peers):
        big = b"q" * 60_000
        assert await collect(await connection.open(PATH, big, bytes)) == [b"60000"]
        assert max(peers[0].data_frames) == 16_384  # the default until the server says otherwise
        peers[0].h2.update_settings(
            {h2.settings.SettingCodes.HEADER_TABLE_SIZE: 0, h2.settings.SettingCodes.MAX_FRAME_SIZE: 65_536}
        )
        peers[0].flush()
        await asyncio.sleep(0.05)
        peers[0].data_frames.clear()
        calls = [await connection.open(PATH, message, bytes) for message in (b"b", big, b"c")]
        results = [await asyncio.wait_for(collect(call), 5) for call in calls]
        assert results == [[b"1"], [b"60000"], [b"1"]]
        assert 16_384 < max(peers[0].data_frames) <= 65_536  # frames as large as the windows allow
        # Every block after the table-size change decoded on the server: the size update went first.
        assert all(peers[0].headers[call.stream_id][b":path"] == PATH for call in calls)


async def test_frames_that_cross_a_reset_are_dropped_and_their_headers_still_decoded() -> None:
    """After the client resets a call, the server may still send on it. Those frames are
    dropped, but their header block is decoded: it may add to the HPACK table, which the next
    call's headers then refer to."""
    reset = asyncio.Event()

    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        if request == b"first":
            await reset.wait()
            await until(lambda: sid in peer.resets)
            peer.raw(DataFrame(sid, grpc_message(b"late") * 100).serialize())  # counts against the connection window
            block = peer.h2.encoder.encode([(b"grpc-status", b"0"), (b"x-late", b"indexed-now")])
            peer.raw(HeadersFrame(sid, block, flags=["END_HEADERS", "END_STREAM"]).serialize())
        else:
            peer.send(sid, grpc_message(b"second"))
            # Uses the table entry the dropped block added: decodes only if the client kept it.
            peer.h2.send_headers(sid, [(b"grpc-status", b"0"), (b"x-late", b"indexed-now")], end_stream=True)
            peer.flush()

    async with serve(script) as (connection, peers):
        first = await connection.open(PATH, b"first", bytes)
        first.cancel()
        reset.set()
        await asyncio.sleep(0.1)
        assert connection.usable
        assert await collect(await connection.open(PATH, b"second", bytes)) == [b"second"]
        assert peers[0].goaways == []


@pytest.mark.parametrize(
    ("violation", "code", "words"),
    [
        ("oversized frame", h2.errors.ErrorCodes.FRAME_SIZE_ERROR, "16384"),
        ("push promise", h2.errors.ErrorCodes.PROTOCOL_ERROR, "PUSH_PROMISE"),
        ("idle stream", h2.errors.ErrorCodes.PROTOCOL_ERROR, "did not open"),
        ("interrupted header block", h2.errors.ErrorCodes.PROTOCOL_ERROR, "interrupted"),
        ("undecodable header block", h2.errors.ErrorCodes.COMPRESSION_ERROR, "undecodable"),
        ("window overflow", h2.errors.ErrorCodes.FLOW_CONTROL_ERROR, "overflowed"),
    ],
)
async def test_a_server_that_breaks_the_protocol_ends_the_connection_with_a_goaway_that_says_why(
    violation: str, code: int, words: str
) -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, grpc_message(b"before"))
        if violation == "oversized frame":
            peer.raw(DataFrame(sid, b"z" * 20_000).serialize())
        elif violation == "push promise":
            peer.raw(PushPromiseFrame(sid, promised_stream_id=2, data=b"", flags=["END_HEADERS"]).serialize())
        elif violation == "idle stream":
            peer.raw(DataFrame(sid + 40, b"z").serialize())
        elif violation == "interrupted header block":
            peer.raw(HeadersFrame(sid, b"\x88").serialize() + DataFrame(sid, b"z").serialize())
        elif violation == "undecodable header block":
            peer.raw(HeadersFrame(sid, b"\xff\xff\xff\xff\x7f", flags=["END_HEADERS"]).serialize())
        else:
            peer.raw(WindowUpdateFrame(0, window_increment=2**31 - 1).serialize())

    async with serve(script) as (connection, peers):
        call = await connection.open(PATH, b"x", bytes)
        with pytest.raises(CallError) as caught:
            await asyncio.wait_for(collect(call), 5)
        assert caught.value.code == grpc_status.UNAVAILABLE
        assert "HTTP/2 protocol error from the server" in caught.value.details and words in caught.value.details
        assert not connection.usable
        await until(lambda: bool(peers[0].goaways))
        assert peers[0].goaways[0][0] == code
        with pytest.raises(CallError) as refused:
            await connection.open(PATH, b"after", bytes)
        assert refused.value.retryable
