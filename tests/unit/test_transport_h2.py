"""The streaming gRPC connection against a real HTTP/2 peer on loopback (an h2 server in the test):
framing split anywhere, padding, trailers, resets, GOAWAY, flow control, dead peers. The real
Triton path is covered by the integration tests; these pin the protocol edges Triton rarely shows."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.errors
import h2.settings
import pytest

from gateway.backend.transport import base as grpc_status
from gateway.backend.transport import h2conn
from gateway.backend.transport.h2 import CallError, Keepalive, connect
from tests.unit.h2_peer import PATH, Peer, answer_length, collect, echo_three, grpc_message, serve

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("chop", [None, 1, 7])
async def test_messages_arrive_whole_however_the_bytes_are_split(chop: int | None) -> None:
    async with serve(echo_three, chop=chop) as (connection, peers):
        call = await connection.open(PATH, b"hello", bytes)
        assert await collect(call) == [b"hello-0", b"hello-1", b"hello-2"]
        headers = peers[0].headers[call.stream_id]
        assert headers[b":path"] == PATH and headers[b"content-type"] == b"application/grpc"
        assert headers[b"te"] == b"trailers"


async def test_several_messages_in_one_frame_one_message_over_several_frames_and_padding() -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, grpc_message(b"a") + grpc_message(b"bb"))
        whole = grpc_message(b"c" * 100)
        peer.send(sid, whole[:3], pad_length=9)
        peer.send(sid, whole[3:50])
        peer.send(sid, whole[50:], pad_length=1)
        peer.trailers(sid)

    async with serve(script) as (connection, _):
        assert await collect(await connection.open(PATH, b"x", bytes)) == [b"a", b"bb", b"c" * 100]


async def test_many_calls_share_the_connection() -> None:
    async with serve(echo_three) as (connection, peers):
        calls = [await connection.open(PATH, b"r%d" % i, bytes) for i in range(50)]
        results = await asyncio.gather(*(collect(c) for c in calls))
        assert results == [[b"r%d-%d" % (i, k) for k in range(3)] for i in range(50)]
        assert len(peers) == 1 and connection.calls == 0


async def test_a_slow_consumer_takes_what_piled_up_as_one_batch() -> None:
    async with serve(echo_three) as (connection, _):
        call = await connection.open(PATH, b"p", bytes)
        await asyncio.sleep(0.1)
        assert await anext(call) == [b"p-0", b"p-1", b"p-2"]


async def test_a_non_ok_status_in_the_trailers_is_raised_after_the_messages() -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, grpc_message(b"first"))
        peer.trailers(sid, status=13, message=b"model%20crashed")

    async with serve(script) as (connection, _):
        call = await connection.open(PATH, b"x", bytes)
        assert await anext(call) == [b"first"]
        with pytest.raises(CallError) as caught:
            await anext(call)
        assert caught.value.code == 13 and caught.value.details == "model crashed"


async def test_a_trailers_only_response_carries_the_error() -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        # the message before the status: their order is not fixed
        peer.h2.send_headers(
            sid,
            [
                (b":status", b"200"),
                (b"content-type", b"application/grpc"),
                (b"grpc-message", b"unknown model"),
                (b"grpc-status", b"5"),
            ],
            end_stream=True,
        )
        peer.flush()

    async with serve(script) as (connection, _):
        with pytest.raises(CallError) as caught:
            await collect(await connection.open(PATH, b"x", bytes))
        assert (caught.value.code, caught.value.details) == (5, "unknown model")


async def test_a_stream_without_status_is_an_error() -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, grpc_message(b"x"), end_stream=True)

    async with serve(script) as (connection, _):
        with pytest.raises(CallError) as caught:
            await collect(await connection.open(PATH, b"x", bytes))
        assert caught.value.code == grpc_status.INTERNAL


async def test_cancelling_resets_the_stream_on_the_server() -> None:
    started = asyncio.Event()

    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, grpc_message(b"one"))
        started.set()

    async with serve(script) as (connection, peers):
        call = await connection.open(PATH, b"x", bytes)
        await started.wait()
        assert await anext(call) == [b"one"]
        call.cancel()
        for _ in range(100):
            if call.stream_id in peers[0].resets:
                break
            await asyncio.sleep(0.01)
        assert peers[0].resets[call.stream_id] == h2.errors.ErrorCodes.CANCEL
        with pytest.raises(StopAsyncIteration):
            await anext(call)


async def test_a_parse_failure_ends_that_call_only() -> None:
    def parse(message: bytes) -> bytes:
        if message == b"r1-1":
            raise ValueError("bad message")
        return message

    async with serve(echo_three) as (connection, _):
        bad, good = await connection.open(PATH, b"r1", parse), await connection.open(PATH, b"r2", parse)
        with pytest.raises(ValueError, match="bad message"):
            await collect(bad)
        assert await collect(good) == [b"r2-0", b"r2-1", b"r2-2"]
        assert connection.usable


async def test_aborting_raises_the_given_error_and_resets_the_stream() -> None:
    async def silent(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)

    async with serve(silent) as (connection, peers):
        call = await connection.open(PATH, b"x", bytes)
        asyncio.get_running_loop().call_later(0.05, call.abort, TimeoutError("deadline"))
        with pytest.raises(TimeoutError, match="deadline"):
            await anext(call)
        await asyncio.sleep(0.05)
        assert peers[0].resets[call.stream_id] == h2.errors.ErrorCodes.CANCEL


async def test_server_reset_and_lost_connection_fail_the_calls() -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, grpc_message(b"partial"))
        if request == b"reset":
            peer.h2.reset_stream(sid, h2.errors.ErrorCodes.INTERNAL_ERROR)
            peer.flush()
        else:
            await asyncio.sleep(0.05)
            assert peer.transport is not None
            peer.transport.abort()

    async with serve(script) as (connection, _):
        with pytest.raises(CallError) as reset:
            await collect(await connection.open(PATH, b"reset", bytes))
        assert reset.value.code == grpc_status.INTERNAL  # gRPC's status for RST_STREAM(INTERNAL_ERROR)
        with pytest.raises(CallError) as lost:
            await collect(await connection.open(PATH, b"drop", bytes))
        assert lost.value.code == grpc_status.UNAVAILABLE
        assert not connection.usable
        with pytest.raises(CallError):
            await connection.open(PATH, b"after", bytes)


async def test_goaway_fails_calls_the_server_never_took_and_retires_the_connection() -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        if request == b"second":
            peer.h2.close_connection(last_stream_id=1)  # only the first call will be served
            peer.flush()

    async with serve(script) as (connection, _):
        first = await connection.open(PATH, b"first", bytes)
        await asyncio.sleep(0.05)
        second = await connection.open(PATH, b"second", bytes)
        with pytest.raises(CallError) as refused:
            await collect(second)
        assert refused.value.code == grpc_status.UNAVAILABLE
        assert not connection.usable
        pending = asyncio.ensure_future(anext(first))
        await asyncio.sleep(0.1)
        assert not pending.done()  # the call the server took goes on
        pending.cancel()


async def test_receive_windows_are_reopened_so_large_outputs_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(h2conn, "_STREAM_WINDOW", 65_536)
    chunk = b"z" * 10_000

    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        for _ in range(40):  # 400 KB: six times the window
            while peer.h2.local_flow_control_window(sid) < len(chunk) + 5:
                await asyncio.sleep(0.005)
            peer.send(sid, grpc_message(chunk))
        peer.trailers(sid)

    async with serve(script) as (connection, peers):
        out = await asyncio.wait_for(collect(await connection.open(PATH, b"big", bytes)), 10)
        assert out == [chunk] * 40 and peers[0].window_updates > 0


async def test_a_request_larger_than_the_send_window_is_sent_in_pieces() -> None:
    async with serve(answer_length) as (connection, _):
        big = b"q" * 200_000  # the server's default window is 65,535 bytes
        assert await asyncio.wait_for(collect(await connection.open(PATH, big, bytes)), 10) == [b"200000"]


async def test_a_peer_that_stops_answering_pings_fails_the_calls() -> None:
    class Mute(asyncio.Protocol):
        """Takes the connection and never says anything back."""

    server = await asyncio.get_running_loop().create_server(Mute, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connection = await connect(f"127.0.0.1:{port}", keepalive=Keepalive(0.1, 0.1))
    try:
        call = await connection.open(PATH, b"x", bytes)
        with pytest.raises(CallError) as caught:
            await asyncio.wait_for(anext(call), 5)
        assert caught.value.code == grpc_status.UNAVAILABLE and "keepalive" in caught.value.details
    finally:
        connection.close()
        server.close()


async def test_calls_beyond_the_servers_stream_limit_wait_for_a_slot() -> None:
    async def slow_echo(peer: Peer, sid: int, request: bytes) -> None:
        await asyncio.sleep(0.02)
        await echo_three(peer, sid, request)

    async with serve(slow_echo) as (connection, peers):
        await asyncio.sleep(0.05)
        peers[0].h2.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 2})
        peers[0].flush()
        await asyncio.sleep(0.05)  # the client has the new limit
        opened = [asyncio.ensure_future(connection.open(PATH, b"r%d" % i, bytes)) for i in range(6)]
        await asyncio.sleep(0.01)
        assert sum(task.done() for task in opened) == 2  # the rest wait for a slot

        async def finish(task: asyncio.Future[Any]) -> list[bytes]:
            return await collect(await task)

        results = await asyncio.wait_for(asyncio.gather(*(finish(task) for task in opened)), 10)
        assert results == [[b"r%d-%d" % (i, k) for k in range(3)] for i in range(6)]
