"""The grpc.aio transport against a real gRPC server in the test's own event loop (grpc.aio's
server with a raw-bytes handler on Triton's ModelStreamInfer path): batching, the end after the
half-close, errors after messages, cancellation reaching the server, and the backend's wiring.
The real Triton path is covered by the integration suite (run with GATEWAY_TRITON_TRANSPORT=aio)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import grpc
import pytest
from tritonclient.grpc import service_pb2

from gateway.backend.transport.aio import AioTransport
from gateway.backend.transport.base import STREAM_INFER_PATH, UNAVAILABLE, CallError
from gateway.backend.triton import TritonBackend
from gateway.backend.types import GenerationRequest
from gateway.errors import InvalidRequestError
from gateway.triton_launcher import free_port

pytestmark = pytest.mark.anyio

Script = Callable[[bytes, grpc.aio.ServicerContext, "Server"], Awaitable[None]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Server:
    """What the server saw: each call's requests, and whether the call ended cancelled."""

    requests: list[list[bytes]] = field(default_factory=list)
    cancelled: list[bool] = field(default_factory=list)
    hold: asyncio.Event = field(default_factory=asyncio.Event)


@asynccontextmanager
async def serve(script: Script) -> AsyncIterator[tuple[AioTransport, Server, int]]:
    seen = Server()

    async def handler(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
        # Read to the end of the requests: this returns only once the client half-closes.
        received = [request async for request in requests]
        seen.requests.append(received)
        try:
            await script(received[0], context, seen)
        except asyncio.CancelledError:  # how grpc.aio's server shows a client's cancellation
            seen.cancelled.append(True)
            raise
        seen.cancelled.append(False)

    service, method = STREAM_INFER_PATH.decode().strip("/").split("/")
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {method: grpc.stream_stream_rpc_method_handler(handler)}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    transport = AioTransport(lambda: channel)
    try:
        yield transport, seen, port
    finally:
        await transport.close()
        await channel.close(grace=None)
        seen.hold.set()
        await server.stop(None)


async def collect(call: AsyncIterator[list[bytes]]) -> list[bytes]:
    return [item async for batch in call for item in batch]


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def echo_three(request: bytes, context: grpc.aio.ServicerContext, seen: Server) -> None:
    for i in range(3):
        await context.write(request + b"-%d" % i)


async def one_then_hold(request: bytes, context: grpc.aio.ServicerContext, seen: Server) -> None:
    await context.write(request + b"-0")
    await seen.hold.wait()


async def test_the_call_sends_one_message_half_closes_and_ends_after_the_servers_last() -> None:
    async with serve(echo_three) as (transport, seen, _):
        call = await transport.open(STREAM_INFER_PATH, b"hello", bytes)
        assert await collect(call) == [b"hello-0", b"hello-1", b"hello-2"]
        assert seen.requests == [[b"hello"]]
        await until(lambda: seen.cancelled == [False])


async def test_everything_that_arrived_since_the_consumer_last_asked_is_one_batch() -> None:
    parsed: list[bytes] = []

    def parse(message: bytes) -> bytes:
        parsed.append(message)
        return message

    async def five_then_hold(request: bytes, context: grpc.aio.ServicerContext, seen: Server) -> None:
        for i in range(5):
            await context.write(b"m%d" % i)
        await seen.hold.wait()

    async with serve(five_then_hold) as (transport, seen, _):
        call = await transport.open(STREAM_INFER_PATH, b"x", parse)
        await until(lambda: len(parsed) == 5)
        assert await anext(call) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
        seen.hold.set()
        assert await collect(call) == []


async def test_many_calls_share_the_channel() -> None:
    async with serve(echo_three) as (transport, seen, _):
        calls = [await transport.open(STREAM_INFER_PATH, b"r%d" % i, bytes) for i in range(30)]
        results = await asyncio.gather(*(collect(c) for c in calls))
        assert results == [[b"r%d-%d" % (i, k) for k in range(3)] for i in range(30)]


async def test_a_non_ok_status_is_raised_after_the_messages_before_it() -> None:
    async def two_then_fail(request: bytes, context: grpc.aio.ServicerContext, seen: Server) -> None:
        await context.write(b"first")
        await context.write(b"second")
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad tensor")

    async with serve(two_then_fail) as (transport, _, _):
        call = await transport.open(STREAM_INFER_PATH, b"x", bytes)
        got: list[bytes] = []
        with pytest.raises(CallError) as caught:
            async for batch in call:
                got += batch
        assert got == [b"first", b"second"]
        assert (caught.value.code, caught.value.details) == (grpc.StatusCode.INVALID_ARGUMENT.value[0], "bad tensor")


async def test_cancel_reaches_the_server_and_delivers_nothing_more() -> None:
    async with serve(one_then_hold) as (transport, seen, _):
        call = await transport.open(STREAM_INFER_PATH, b"c", bytes)
        assert await anext(call) == [b"c-0"]
        call.cancel()
        with pytest.raises(StopAsyncIteration):
            await anext(call)
        await until(lambda: seen.cancelled == [True])
        await until(lambda: call.reader.done())


async def test_abort_gives_the_consumer_its_error_and_the_server_a_cancellation() -> None:
    async with serve(one_then_hold) as (transport, seen, _):
        call = await transport.open(STREAM_INFER_PATH, b"a", bytes)
        assert await anext(call) == [b"a-0"]
        waiting = asyncio.ensure_future(anext(call))
        await asyncio.sleep(0.01)
        call.abort(TimeoutError("deadline"))
        with pytest.raises(TimeoutError, match="deadline"):
            await waiting
        await until(lambda: seen.cancelled == [True])


async def test_a_parse_error_ends_only_its_own_call_and_cancels_it() -> None:
    def parse(message: bytes) -> bytes:
        if message.startswith(b"bad"):
            raise ValueError("unparseable")
        return message

    async def script(request: bytes, context: grpc.aio.ServicerContext, seen: Server) -> None:
        await context.write(request + b"-0")
        if request == b"bad":
            await seen.hold.wait()
        else:
            await until(lambda: len(seen.cancelled) == 1)  # the bad call has ended first
            await context.write(request + b"-1")

    async with serve(script) as (transport, seen, _):
        bad = await transport.open(STREAM_INFER_PATH, b"bad", parse)
        good = await transport.open(STREAM_INFER_PATH, b"good", parse)
        with pytest.raises(ValueError, match="unparseable"):
            await collect(bad)
        assert await collect(good) == [b"good-0", b"good-1"]
        await until(lambda: sorted(seen.cancelled) == [False, True])


async def test_an_unreachable_server_fails_the_call_as_unavailable() -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}")
    try:
        call = await AioTransport(lambda: channel).open(STREAM_INFER_PATH, b"x", bytes)
        with pytest.raises(CallError) as caught:
            await collect(call)
        assert caught.value.code == UNAVAILABLE
    finally:
        await channel.close(grace=None)


async def test_no_channel_yet_is_unavailable() -> None:
    with pytest.raises(CallError) as caught:
        await AioTransport(lambda: None).open(STREAM_INFER_PATH, b"x", bytes)
    assert caught.value.code == UNAVAILABLE


async def test_closing_the_transport_fails_open_calls_and_leaves_no_reader() -> None:
    async with serve(one_then_hold) as (transport, seen, _):
        call = await transport.open(STREAM_INFER_PATH, b"z", bytes)
        assert await anext(call) == [b"z-0"]
        await transport.close()
        assert call.reader.done()
        with pytest.raises(CallError) as caught:
            await anext(call)
        assert caught.value.code == UNAVAILABLE
        await until(lambda: seen.cancelled == [True])


async def test_the_backend_streams_on_its_own_channel_with_transport_aio() -> None:
    """``TritonBackend(transport="aio")`` opens its streams on the control calls' channel, and an
    in-stream error still reaches the consumer as the typed error."""

    async def reply(request: bytes, context: grpc.aio.ServicerContext, seen: Server) -> None:
        infer = service_pb2.ModelInferRequest.FromString(request)
        await context.write(
            service_pb2.ModelStreamInferResponse(error_message=f"{infer.model_name}: INVALID_ARG").SerializeToString()
        )

    async with serve(reply) as (_, seen, port):
        backend = TritonBackend(f"127.0.0.1:{port}", transport="aio")
        await backend.start()
        try:
            request = GenerationRequest(request_id="r1", model="m", prompt="hi", sampling={"max_tokens": 4})
            with pytest.raises(InvalidRequestError, match="m: INVALID_ARG"):
                async for _ in backend.generate(request):
                    pass
        finally:
            await backend.close()
        assert len(seen.requests) == 1
