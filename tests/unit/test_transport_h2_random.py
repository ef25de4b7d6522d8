"""The gateway's HTTP/2 client fed what a server might send, cut anywhere: gRPC messages split at
every byte boundary into DATA frames, and random sequences of valid and invalid frames after the
preface (hypothesis, derandomized). Whatever comes, ``data_received`` never raises, every call ends
with its messages or a ``CallError`` once the server is gone, and no stream is left behind."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gateway.backend.transport import h2conn
from gateway.backend.transport.base import CallError
from gateway.backend.transport.h2call import StreamCall
from gateway.backend.transport.h2frames import DEFAULT_MAX_FRAME
from tests.unit.h2_peer import PATH, MemoryPeer, assert_clean, collect, data, grpc_message

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def raw(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload


async def _served(peer: MemoryPeer, frames: list[bytes]) -> list[bytes]:
    """A call answered with ``frames`` as DATA on its stream, then OK trailers."""
    call = await peer.connection.open(PATH, b"x", bytes)
    sid = call.stream_id
    peer.feed(peer.respond(sid), *(data(sid, piece) for piece in frames), peer.trailers(sid))
    return await asyncio.wait_for(collect(call), 5)


async def test_messages_split_into_three_frames_at_every_pair_of_byte_boundaries() -> None:
    messages = [b"", b"ab", b"c" * 20]
    stream = b"".join(grpc_message(m) for m in messages)
    peer = MemoryPeer()
    for i in range(len(stream) + 1):
        for j in range(i, len(stream) + 1):
            assert await _served(peer, [stream[:i], stream[i:j], stream[j:]]) == messages, (i, j)
    assert_clean(peer.connection)


async def test_a_large_message_split_at_every_byte_boundary() -> None:
    """Frames of 4 kB and more are handed on as views: the large message and the small one after
    it come out whole wherever the cut falls, the view path and the bytes path both taken."""
    messages = [b"y" * 6_000, b"z"]
    stream = b"".join(grpc_message(m) for m in messages)
    peer = MemoryPeer()
    for i in range(len(stream) + 1):
        assert await _served(peer, [stream[:i], stream[i:]]) == messages, i
    assert_clean(peer.connection)


# -- random frame sequences -----------------------------------------------------------------------

_SIDS = st.sampled_from([1, 1, 1, 3, 5, 2, 0, 0x7FFFFFFF])
_PAYLOADS = st.sampled_from(
    [grpc_message(b"ok"), grpc_message(b"ok")[:3], b"\x01\x00\x00\x00\x01z", b"\x00\xff\xff\xff\xff", b""]
) | st.binary(max_size=40)
_VALUES = st.sampled_from([0, 1, 100, 16_384, 65_535, 2**24, 2**31 - 1, 2**32 - 1])
_OPS = st.one_of(
    st.tuples(st.just("data"), _SIDS, _PAYLOADS, st.sampled_from([0, 1, 8, 9])),
    st.tuples(
        st.just("headers"),
        _SIDS,
        st.sampled_from(["response", "ok", "error", "http-503", "raw"]),
        st.booleans(),
        st.binary(max_size=20),
    ),
    st.tuples(st.just("frame"), st.integers(0, 12), st.integers(0, 255), _SIDS, st.binary(max_size=24)),
    st.tuples(st.just("window"), _SIDS, _VALUES),
    st.tuples(st.just("settings"), st.lists(st.tuples(st.integers(0, 8), _VALUES), max_size=3)),
    st.tuples(st.just("goaway"), st.sampled_from([0, 1, 2, 3, 5, 2**31 - 1]), st.sampled_from([0, 1, 2, 11])),
    st.tuples(st.just("rst"), _SIDS, st.integers(0, 13)),
)
_HEADERS = {
    "response": [(b":status", b"200"), (b"content-type", b"application/grpc")],
    "ok": [(b"grpc-status", b"0")],
    "error": [(b"grpc-status", b"13"), (b"grpc-message", b"boom")],
    "http-503": [(b":status", b"503")],
}


def _frame(peer: MemoryPeer, op: tuple[Any, ...]) -> bytes:
    kind = op[0]
    if kind == "data":
        return raw(0, op[3], op[1], op[2])
    if kind == "headers":
        _, sid, which, end, junk = op
        block = junk if which == "raw" else peer.encoder.encode(_HEADERS[which])
        return raw(1, 0x4 | (0x1 if end else 0), sid, block)
    if kind == "frame":
        return raw(op[1], op[2], op[3], op[4])
    if kind == "window":
        return raw(8, 0, op[1], op[2].to_bytes(4, "big"))
    if kind == "settings":
        return raw(4, 0, 0, b"".join(name.to_bytes(2, "big") + value.to_bytes(4, "big") for name, value in op[1]))
    if kind == "goaway":
        return raw(7, 0, 0, op[1].to_bytes(4, "big") + op[2].to_bytes(4, "big"))
    return raw(3, 0, op[1], op[2].to_bytes(4, "big"))


async def _outcome(call: StreamCall[bytes]) -> list[bytes] | CallError:
    try:
        return await collect(call)
    except CallError as exc:
        return exc


async def _run(ops: list[tuple[Any, ...]], cuts: list[int]) -> None:
    peer = MemoryPeer()
    connection = peer.connection
    # Stream 1: read as it goes; stream 3: its request still waits for window; stream 5: unread.
    calls = [await connection.open(PATH, message, bytes) for message in (b"a", b"q" * 100_000, b"c")]
    reader = asyncio.ensure_future(_outcome(calls[0]))
    stream = b"".join(_frame(peer, op) for op in ops)
    bounds = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    for start, stop in zip(bounds, bounds[1:], strict=False):
        connection.data_received(stream[start:stop])  # never raises, whatever it is fed
        assert len(connection._inbuf) < 9 + DEFAULT_MAX_FRAME
        assert connection._headers_in_size <= h2conn._MAX_HEADER_BLOCK
        assert all(not call._done for call in connection._calls.values())
        if connection.closed:
            assert connection.calls == 0
        await asyncio.sleep(0)
    event("connection ended by the client" if connection.closed else "connection still open")
    connection.connection_lost(None)  # the server goes away: every call must end
    results = await asyncio.wait_for(asyncio.gather(reader, *(_outcome(call) for call in calls[1:])), 5)
    assert all(isinstance(result, list | CallError) for result in results)
    event(f"stream 1 ended with {'messages' if isinstance(results[0], list) else 'an error'}")
    assert_clean(connection)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_OPS, max_size=30), cuts=st.lists(st.integers(0, 4_000), max_size=4))
def test_random_frames_end_every_call_and_leave_no_stream(ops: list[tuple[Any, ...]], cuts: list[int]) -> None:
    asyncio.run(asyncio.wait_for(_run(ops, cuts), 10))
