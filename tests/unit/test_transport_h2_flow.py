"""Message reassembly, the message size cap, per-call flow control (backpressure) and HTTP
statuses, against a real h2 server peer (on loopback, or fed in memory where loop time is
measured)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest

from gateway.backend.transport import base as grpc_status
from gateway.backend.transport import h2conn
from gateway.backend.transport.h2 import CallError, GrpcConnection
from tests.unit.h2_peer import PATH, Peer, collect, grpc_message, serve, until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Wire:
    """The connection's transport in memory: what it writes is kept for the server side."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def get_extra_info(self, name: str) -> Any:
        return None

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def test_a_4_mib_message_in_16_kib_frames_is_reassembled_in_linear_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CPU time of all the frames' ``data_received`` (~2-3 ms here; it was ~100 ms when the
    buffer was re-concatenated per frame). The bound is loose, and CPU time, so a busy machine
    cannot fail it."""
    monkeypatch.setattr(h2conn, "_STREAM_WINDOW", 8 * 1024 * 1024)  # the whole message in flight at once
    wire = _Wire()
    connection = GrpcConnection("peer:1", "http")
    connection.connection_made(wire)  # type: ignore[arg-type]
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    server.receive_data(b"".join(wire.out))
    call = await connection.open(PATH, b"big", len)
    events = server.receive_data(b"".join(wire.out[1:]))
    assert any(isinstance(e, h2.events.RequestReceived) for e in events)
    size = 4 * 1024 * 1024
    message = grpc_message(b"m" * size)
    server.send_headers(call.stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc")])
    frames = [server.data_to_send()]
    for i in range(0, len(message), 16_384):
        server.send_data(call.stream_id, message[i : i + 16_384])
        frames.append(server.data_to_send())
    assert len(frames) > 256
    started = time.process_time()  # CPU time: a busy machine's scheduling does not count
    for frame in frames:
        connection.data_received(frame)
    elapsed = time.process_time() - started
    assert await anext(call) == [size]
    assert elapsed < 0.05, f"{elapsed * 1000:.1f} ms"


@pytest.mark.parametrize("chop", [None, 3])
async def test_a_message_over_the_size_limit_ends_its_call_with_a_clear_error(chop: int | None) -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, grpc_message(b"small"))
        peer.send(sid, grpc_message(b"b" * 5000))

    async with serve(script, chop=chop, max_message_bytes=4096) as (connection, peers):
        call = await connection.open(PATH, b"x", bytes)
        assert await anext(call) == [b"small"]
        with pytest.raises(CallError) as caught:
            await anext(call)
        assert caught.value.code == grpc_status.RESOURCE_EXHAUSTED
        assert "5000 bytes" in caught.value.details and "grpc_max_message_bytes" in caught.value.details
        await until(lambda: peers[0].resets.get(call.stream_id) == h2.errors.ErrorCodes.CANCEL)
        assert connection.usable  # the other calls go on


async def test_a_consumer_that_stops_reading_stalls_its_own_stream_not_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(h2conn, "_STREAM_WINDOW", 65_536)
    chunk = b"z" * 10_000
    sent: dict[bytes, int] = {}

    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        sent[request] = 0
        for _ in range(40):  # 400 KB: six stream windows
            while peer.h2.local_flow_control_window(sid) < len(chunk) + 5:
                await asyncio.sleep(0.005)
            peer.send(sid, grpc_message(chunk))
            sent[request] += 1
        peer.trailers(sid)

    async with serve(script) as (connection, _):
        slow = await connection.open(PATH, b"slow", bytes)
        fast = await connection.open(PATH, b"fast", bytes)
        assert await asyncio.wait_for(collect(fast), 10) == [chunk] * 40  # not held up by the slow one
        await asyncio.sleep(0.1)
        assert sent[b"slow"] <= 7  # one window of messages, then the server waits
        out = await asyncio.wait_for(collect(slow), 10)  # reading again reopens the window
        assert out == [chunk] * 40


class _StingyPeer(Peer):
    """Opens only the connection-level window to the client's requests, never a stream's."""

    ack_data = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.h2.increment_flow_control_window(1 << 20)
        self.flush()


async def test_a_larger_initial_window_in_new_settings_sends_the_queued_request() -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, grpc_message(b"%d" % len(request)))
        peer.trailers(sid)

    async with serve(script, peer=_StingyPeer) as (connection, peers):
        call = await connection.open(PATH, b"q" * 200_000, bytes)  # the stream window is 65,535
        await until(lambda: bool(peers[0].bodies))
        await asyncio.sleep(0.05)
        assert len(peers[0].bodies[call.stream_id]) == 65_535  # stuck on the stream window
        peers[0].h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
        peers[0].flush()
        assert await asyncio.wait_for(collect(call), 5) == [b"200000"]


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (b"400", grpc_status.INTERNAL),
        (b"401", grpc_status.UNAUTHENTICATED),
        (b"403", grpc_status.PERMISSION_DENIED),
        (b"404", grpc_status.UNIMPLEMENTED),
        (b"429", grpc_status.UNAVAILABLE),
        (b"502", grpc_status.UNAVAILABLE),
        (b"503", grpc_status.UNAVAILABLE),
        (b"504", grpc_status.UNAVAILABLE),
        (b"418", grpc_status.UNKNOWN),
    ],
)
async def test_a_non_200_http_status_maps_to_grpcs_documented_code(status: bytes, code: int) -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.h2.send_headers(sid, [(b":status", status), (b"content-type", b"text/html")])
        peer.send(sid, b"<html>not gRPC</html>", end_stream=True)

    async with serve(script) as (connection, _):
        with pytest.raises(CallError) as caught:
            await collect(await connection.open(PATH, b"x", bytes))
        assert caught.value.code == code and status.decode() in caught.value.details
