"""The grpc.aio transport against the same draining h2 peer as ``test_transport_h2_goaway``:
GOAWAY(2^31-1) + PING, then GOAWAY(last id), while calls stream. The calls the server took run to
their end, and a new call after the drain goes to a new connection."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gateway.backend.transport.aio import AioTransport
from tests.unit.h2_peer import PATH, Peer, Server, collect, grpc_message, until

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


async def test_a_draining_server_finishes_the_calls_it_took_on_grpc_aio() -> None:
    server = Server(_stream_slowly)
    channel = grpc.aio.insecure_channel(await server.start(), options=[("grpc.enable_retries", 0)])
    transport = AioTransport(lambda: channel)
    try:
        calls = [await transport.open(PATH, b"c%d" % i, bytes) for i in range(3)]
        results = [asyncio.ensure_future(collect(call)) for call in calls]
        await until(lambda: len(server.peers) == 1 and len(server.peers[0].headers) == 3)
        old = server.peers[0]
        old.goaway(2**31 - 1)
        old.h2.ping(b"drain!!!")
        old.flush()
        await old.wait_ping_ack()
        old.goaway(max(old.headers))

        outputs = await asyncio.wait_for(asyncio.gather(*results), 10)
        assert outputs == [[b"c%d-%d" % (n, i) for i in range(MESSAGES)] for n in range(3)]
        fresh = await transport.open(PATH, b"new", bytes)
        assert await asyncio.wait_for(collect(fresh), 10) == [b"new-%d" % i for i in range(MESSAGES)]
        assert len(server.peers) == 2 and server.peers[1].headers  # the new call went to a new connection
    finally:
        await transport.close()
        await channel.close(grace=None)
        server.close()
