"""GOAWAY against a real h2 server peer: a draining server (GOAWAY(2^31-1) + PING, then
GOAWAY(last id), as grpc servers, Envoy and nginx do) finishes the calls it took; the calls it did
not take fail as retryable; new calls go to a new connection; an error GOAWAY fails everything."""

from __future__ import annotations

import asyncio

import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import pytest

from gateway.backend.transport import base as grpc_status
from gateway.backend.transport.h2 import CallError, Keepalive
from tests.unit.h2_peer import PATH, Peer, collect, grpc_message, serve, serve_transport, until

pytestmark = pytest.mark.anyio

MESSAGES = 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _stream_slowly(peer: Peer, sid: int, request: bytes) -> None:
    peer.respond(sid)
    for i in range(MESSAGES):
        peer.send(sid, grpc_message(request + b"-%d" % i))
        await asyncio.sleep(0.01)
    peer.trailers(sid)


async def test_a_draining_server_finishes_the_calls_it_took_and_the_rest_are_retryable() -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        if request != b"late":  # the server never answers this one: its GOAWAY leaves it out
            await _stream_slowly(peer, sid, request)

    async with serve_transport(script) as (transport, peers):
        calls = [await transport.open(PATH, b"c%d" % i, bytes) for i in range(3)]  # streams 1, 3, 5
        late = await transport.open(PATH, b"late", bytes)  # stream 7
        results = [asyncio.ensure_future(collect(call)) for call in calls]
        await asyncio.sleep(0.05)  # the calls are streaming
        old = peers[0]
        old.goaway(2**31 - 1)
        old.h2.ping(b"drain!!!")
        old.flush()
        await old.wait_ping_ack()
        old.goaway(5)
        await asyncio.sleep(0.02)
        old.goaway(5)  # a second one with the same (or a lower) id changes nothing for 1, 3, 5

        with pytest.raises(CallError) as refused:
            await collect(late)
        assert refused.value.code == grpc_status.UNAVAILABLE and refused.value.retryable

        fresh = await transport.open(PATH, b"new", bytes)  # after the GOAWAY: another connection
        await until(lambda: len(peers) == 2 and peers[1].headers.keys() == {1})

        outputs = await asyncio.wait_for(asyncio.gather(*results), 10)
        assert outputs == [[b"c%d-%d" % (n, i) for i in range(MESSAGES)] for n in range(3)]
        assert await collect(fresh) == [b"new-%d" % i for i in range(MESSAGES)]
        await asyncio.wait_for(old.lost, 5)  # closed once its last call ended


async def test_a_second_goaway_with_a_lower_last_stream_id_fails_the_calls_above_it() -> None:
    async with serve(_stream_slowly) as (connection, peers):
        calls = [await connection.open(PATH, b"c%d" % i, bytes) for i in range(3)]  # streams 1, 3, 5
        results = [asyncio.ensure_future(collect(call)) for call in calls]
        await asyncio.sleep(0.03)
        peers[0].goaway(5)
        await asyncio.sleep(0.02)
        peers[0].goaway(1)
        outcome = await asyncio.wait_for(asyncio.gather(*results, return_exceptions=True), 10)
        assert outcome[0] == [b"c0-%d" % i for i in range(MESSAGES)]
        assert all(isinstance(e, CallError) and e.retryable for e in outcome[1:])
        assert not connection.usable


async def test_a_goaway_with_an_error_fails_every_call() -> None:
    async with serve(_stream_slowly) as (connection, peers):
        calls = [await connection.open(PATH, b"c%d" % i, bytes) for i in range(2)]
        await asyncio.sleep(0.03)
        peers[0].goaway(1, error_code=h2.errors.ErrorCodes.INTERNAL_ERROR)
        for call, retryable in zip(calls, (False, True), strict=True):
            with pytest.raises(CallError) as caught:
                await asyncio.wait_for(collect(call), 5)
            assert caught.value.code == grpc_status.UNAVAILABLE and caught.value.retryable is retryable
        await asyncio.wait_for(peers[0].lost, 5)


async def test_too_many_pings_doubles_the_keepalive_interval_for_the_next_connections() -> None:
    keepalive = Keepalive(30.0, 10.0)

    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.goaway(sid, error_code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, debug=b"too_many_pings")

    async with serve_transport(script, keepalive=keepalive) as (transport, _):
        with pytest.raises(CallError) as caught:
            await collect(await transport.open(PATH, b"x", bytes))
        assert "too_many_pings" in caught.value.details
        assert keepalive.interval == 60.0
        await until(lambda: transport._connection is not None and transport._connection.closed)
