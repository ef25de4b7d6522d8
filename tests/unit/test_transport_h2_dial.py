"""Dialing, deadlines, keepalive and the one transparent retry, against real peers on loopback: a
failed dial is remembered for a growing backoff; a deadline covers the dial and the wait for a
stream slot; a call the server never started is retried once by ``TritonBackend.generate``."""

from __future__ import annotations

import asyncio
import ssl
import struct
import time

import h2.errors
import h2.settings
import pytest
from tritonclient.grpc import service_pb2

from gateway.backend import triton as triton_module
from gateway.backend.transport import base as grpc_status
from gateway.backend.transport.h2 import CallError, H2Transport, Keepalive, connect
from gateway.backend.triton import TritonBackend
from gateway.backend.types import GenerationRequest
from gateway.errors import BackendTimeoutError, BackendUnavailableError
from gateway.triton_launcher import free_port
from tests.unit.h2_peer import PATH, Peer, Server, collect, echo_three, grpc_message, serve, serve_transport, until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Mute(asyncio.Protocol):
    """Takes the connection and never says anything back (not even a TLS handshake)."""


async def test_a_failed_dial_fails_the_next_calls_fast_until_its_growing_backoff_passes() -> None:
    port = free_port()
    transport = H2Transport(f"127.0.0.1:{port}", backoff=(0.5, 1.0))
    server = Server(echo_three)
    try:
        with pytest.raises(CallError) as first:
            await transport.open(PATH, b"x", bytes)
        assert first.value.code == grpc_status.UNAVAILABLE and "cannot connect" in first.value.details
        await asyncio.sleep(0.55)
        with pytest.raises(CallError):  # dials again: still down; now remembered for 1 s
            await transport.open(PATH, b"x", bytes)
        await server.start(port)
        await asyncio.sleep(0.3)  # 0.7 s of room for a busy machine before the second backoff ends
        with pytest.raises(CallError) as cached:  # the server is up, but the failure is remembered
            await transport.open(PATH, b"x", bytes)
        assert cached.value.details == first.value.details and not server.peers  # no dial was made
        await asyncio.sleep(0.75)
        assert await collect(await transport.open(PATH, b"up", bytes)) == [b"up-0", b"up-1", b"up-2"]
        assert len(server.peers) == 1
    finally:
        await transport.close()
        server.close()


async def test_a_reachable_server_clears_the_remembered_failure() -> None:
    """What the backend does when its readiness check gets Triton's answer: the next call dials at
    once instead of failing on the remembered dial until the backoff passes."""
    port = free_port()
    transport = H2Transport(f"127.0.0.1:{port}", backoff=(30.0, 30.0))
    server = Server(echo_three)
    try:
        with pytest.raises(CallError):
            await transport.open(PATH, b"x", bytes)
        await server.start(port)
        with pytest.raises(CallError):  # remembered for 30 s
            await transport.open(PATH, b"x", bytes)
        transport.reachable()
        assert await collect(await transport.open(PATH, b"up", bytes)) == [b"up-0", b"up-1", b"up-2"]
    finally:
        await transport.close()
        server.close()


async def test_the_deadline_covers_the_dial() -> None:
    server = await asyncio.get_running_loop().create_server(_Mute, "127.0.0.1", 0)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    transport = H2Transport(f"127.0.0.1:{server.sockets[0].getsockname()[1]}", ssl_context=context)
    try:
        started = time.monotonic()
        with pytest.raises(CallError) as caught:  # the TLS handshake never completes
            await transport.open(PATH, b"x", bytes, deadline=started + 0.2)
        assert caught.value.code == grpc_status.DEADLINE_EXCEEDED and "connecting" in caught.value.details
        assert time.monotonic() - started < 1.0
    finally:
        await transport.close()
        server.close()


async def test_the_deadline_covers_the_wait_for_a_stream_slot() -> None:
    async def silent(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)

    async with serve(silent) as (connection, peers):
        await until(lambda: bool(peers))
        peers[0].h2.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1})
        peers[0].flush()
        await asyncio.sleep(0.05)
        await connection.open(PATH, b"first", bytes)
        started = time.monotonic()
        with pytest.raises(CallError) as caught:
            await connection.open(PATH, b"second", bytes, time.monotonic() + 0.1)
        assert caught.value.code == grpc_status.DEADLINE_EXCEEDED and "slot" in caught.value.details
        assert time.monotonic() - started < 1.0


async def test_an_unanswered_ping_fails_the_calls_after_the_keepalive_timeout_not_an_interval() -> None:
    server = await asyncio.get_running_loop().create_server(_Mute, "127.0.0.1", 0)
    started = time.monotonic()  # before the connection, whose quiet time the interval counts
    connection = await connect(f"127.0.0.1:{server.sockets[0].getsockname()[1]}", keepalive=Keepalive(1.0, 0.05))
    try:
        call = await connection.open(PATH, b"x", bytes)
        with pytest.raises(CallError) as caught:
            await asyncio.wait_for(anext(call), 5)
        elapsed = time.monotonic() - started
        assert caught.value.code == grpc_status.UNAVAILABLE and "keepalive" in caught.value.details
        assert 1.0 <= elapsed < 1.8  # ping at 1 s, dead at 1.05 s (two intervals would be 2 s)
    finally:
        connection.close()
        server.close()


async def test_a_call_whose_request_never_fully_left_is_retryable_when_the_connection_drops() -> None:
    class Stingy(Peer):
        ack_data = False  # the client's 200 kB request stays stuck behind the 64 kB window

    async def never(peer: Peer, sid: int, request: bytes) -> None:
        raise AssertionError("the request cannot have arrived whole")

    async with serve(never, peer=Stingy) as (connection, peers):
        call = await connection.open(PATH, b"q" * 200_000, bytes)
        await until(lambda: bool(peers[0].bodies))
        assert peers[0].transport is not None
        peers[0].transport.abort()
        with pytest.raises(CallError) as caught:
            await collect(call)
        assert caught.value.code == grpc_status.UNAVAILABLE and caught.value.retryable


# -- the retry in TritonBackend.generate ------------------------------------------------------


def _response(text: bytes, final: bool) -> bytes:
    reply = service_pb2.ModelStreamInferResponse()
    response = reply.infer_response
    response.model_name = "m"
    tensor = response.outputs.add()
    tensor.name, tensor.datatype = "text_output", "BYTES"
    tensor.shape.append(1)
    response.raw_output_contents.append(struct.pack("<I", len(text)) + text)
    response.parameters["triton_final_response"].bool_param = final
    return grpc_message(reply.SerializeToString())


async def _generate(transport: H2Transport, deadline: float | None = None) -> list[bytes]:
    backend = TritonBackend("127.0.0.1:1", transport=transport)
    await backend.start()
    try:
        request = GenerationRequest(request_id="r", model="m", prompt="p", sampling={}, deadline=deadline)
        return [text async for batch in backend.generate(request) for chunk in batch for text in chunk.text]
    finally:
        await backend.close()


async def test_a_refused_stream_is_retried_once_on_a_new_connection() -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        if peer is served[0]:
            peer.h2.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
            peer.flush()
            return
        peer.respond(sid)
        peer.send(sid, _response(b"hello", False))
        peer.send(sid, _response(b" world", True))
        peer.trailers(sid)

    async with serve_transport(script) as (transport, served):
        assert await _generate(transport) == [b"hello", b" world"]
        assert [len(peer.headers) for peer in served] == [1, 1]  # one refusal, then a new connection


async def test_only_once_and_only_before_anything_was_yielded() -> None:
    async def refuse(peer: Peer, sid: int, request: bytes) -> None:
        peer.h2.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
        peer.flush()

    async with serve_transport(refuse) as (transport, served):
        backend = TritonBackend("127.0.0.1:1", transport=transport)
        await backend.start()
        stream = backend.generate(GenerationRequest(request_id="r", model="m", prompt="p", sampling={}))
        with pytest.raises(BackendUnavailableError, match="refused") as failed:
            await anext(stream)
        assert stream.error is failed.value
        with pytest.raises(StopAsyncIteration):  # ended, as a generator: no third call is opened
            await anext(stream)
        await stream.aclose()
        await backend.close()
        assert len(served) == 2

    async def refuse_late(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, _response(b"partial", False))
        await asyncio.sleep(0.05)
        peer.h2.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
        peer.flush()

    async with serve_transport(refuse_late) as (transport, served):
        with pytest.raises(BackendUnavailableError, match="refused"):
            await _generate(transport)
        assert len(served) == 1


async def test_a_deadline_passing_while_dialing_is_the_backends_timeout_error() -> None:
    server = await asyncio.get_running_loop().create_server(_Mute, "127.0.0.1", 0)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    transport = H2Transport(f"127.0.0.1:{server.sockets[0].getsockname()[1]}", ssl_context=context)
    try:
        with pytest.raises(BackendTimeoutError):
            await asyncio.wait_for(_generate(transport, deadline=time.monotonic() + 0.2), 5)
    finally:
        server.close()


async def _first_batch_then_close(transport: H2Transport, peer: list[Peer]) -> None:
    """Take one batch and stop, as the generation does once the model's final response is in; the
    backend stays open until the server has seen a reset of the call (or 5 s pass)."""
    backend = TritonBackend("127.0.0.1:1", transport=transport)
    await backend.start()
    try:
        stream = backend.generate(GenerationRequest(request_id="r", model="m", prompt="p", sampling={}))
        await anext(stream)
        await stream.aclose()
        await until(lambda: bool(peer[0].resets))
    finally:
        await backend.close()


async def test_a_call_triton_finished_ends_with_its_trailers_not_a_reset() -> None:
    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, _response(b"done", True))
        await asyncio.sleep(0.2)  # the trailers a read later than the final response
        peer.trailers(sid)

    async with serve_transport(script) as (transport, served):
        backend = TritonBackend("127.0.0.1:1", transport=transport)
        await backend.start()
        stream = backend.generate(GenerationRequest(request_id="r", model="m", prompt="p", sampling={}))
        assert [chunk.final for chunk in await anext(stream)] == [True]
        await stream.aclose()
        await asyncio.sleep(0.4)
        assert served[0].resets == {}  # no RST_STREAM for work that was over
        assert transport._connection is not None and transport._connection.calls == 0  # the trailers ended it
        await backend.close()


async def test_a_finished_call_whose_trailers_never_come_is_reset_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(triton_module, "TRAILERS_GRACE", 0.1)

    async def no_trailers(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, _response(b"done", True))

    async with serve_transport(no_trailers) as (transport, served):
        await _first_batch_then_close(transport, served)
        assert list(served[0].resets.values()) == [h2.errors.ErrorCodes.CANCEL]


async def test_a_call_left_before_its_final_response_is_reset_at_once() -> None:
    async def streaming(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, _response(b"more", False))

    async with serve_transport(streaming) as (transport, served):
        started = time.monotonic()
        await _first_batch_then_close(transport, served)
        assert time.monotonic() - started < 0.5  # at once, not after TRAILERS_GRACE (1 s)
        assert list(served[0].resets.values()) == [h2.errors.ErrorCodes.CANCEL]


async def test_a_final_response_read_but_not_taken_still_gets_the_trailers_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The consumer stops (a stop string, say) after the reader has read the model's final
    response but before taking it: Triton's work is over, so the call is not reset at once."""
    monkeypatch.setattr(triton_module, "TRAILERS_GRACE", 0.3)
    final_sent = asyncio.Event()

    async def script(peer: Peer, sid: int, request: bytes) -> None:
        peer.respond(sid)
        peer.send(sid, _response(b"stop here", False))
        await final_sent.wait()
        peer.send(sid, _response(b" more", True))  # and no trailers

    async with serve_transport(script) as (transport, served):
        backend = TritonBackend("127.0.0.1:1", transport=transport)
        await backend.start()
        stream = backend.generate(GenerationRequest(request_id="r", model="m", prompt="p", sampling={}))
        assert [chunk.final for chunk in await anext(stream)] == [False]
        final_sent.set()
        await until(lambda: stream._reader is not None and stream._reader.final)
        await stream.aclose()
        await asyncio.sleep(0.1)
        assert served[0].resets == {}  # within the grace: no RST_STREAM for work that is over
        await until(lambda: bool(served[0].resets))  # the trailers never came: reset after it
        assert list(served[0].resets.values()) == [h2.errors.ErrorCodes.CANCEL]
        await backend.close()
