"""CPU per token of the gateway's own per-token path, in one process, without sockets or Triton.

A real ``GrpcConnection`` is fed the exact bytes an HTTP/2 gRPC server sends (made by an h2
server-side connection: headers, one DATA frame per token, trailers), and the core's
``Generation`` and the edge's ``StreamFrames`` turn them into SSE frames as they do for a real
request; only the sockets, uvicorn and Triton are missing. On a shared 2-core box the end-to-end
figure (``gateway_bench.py``) moves ±15 % run to run; the best of several rounds here moves less
(~10 %), and a profiler (cProfile) on it shows our own per-token calls without the sockets' noise.
Its µs/token is *part* of the gateway's: add the socket write per chunk (~12-15 µs), the
event-loop wake-ups, uvicorn and the per-request HTTP work.

The second line is the per-request part measured the same way (prepare, admit, open the call: the
HTTP/2 HEADERS and DATA out, the response HEADERS in). The last lines time the reassembly of one
large message cut in 16 KiB frames (loop time of all the frames' ``data_received``, fresh process
memory included).

    .venv/bin/python bench/hotpath.py --requests 300 --tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from tritonclient.grpc import service_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.backend.replicas.endpoints import parse_endpoints
from gateway.backend.replicas.pool import ReplicaPool
from gateway.backend.replicas.router import Policy, Router
from gateway.backend.transport.h2 import GrpcConnection
from gateway.backend.triton import TritonBackend
from gateway.backend.types import BackendModel
from gateway.config import Settings
from gateway.core.admission import Admission
from gateway.core.service import CompletionService
from gateway.http.streaming import StreamFrames
from gateway.metrics import Metrics
from gateway.models.catalog import ModelCatalog
from gateway.plan.requests import CompletionRequest
from gateway.plan.prepare import RequestContext, prepare_completion


class _Transport:
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


def _response(text: bytes, final: bool, reason: bytes) -> bytes:
    reply = service_pb2.ModelStreamInferResponse()
    response = reply.infer_response
    response.model_name, response.id = "firehose", "0123456789abcdef0123456789abcdef"
    for name, datatype in (
        ("text_output", "BYTES"),
        ("finish_reason", "BYTES"),
        ("num_input_tokens", "UINT32"),
        ("num_output_tokens", "UINT32"),
    ):
        tensor = response.outputs.add()
        tensor.name, tensor.datatype = name, datatype
        tensor.shape.append(1)
    response.raw_output_contents.extend(
        [
            struct.pack("<I", len(text)) + text,
            struct.pack("<I", len(reason)) + reason,
            struct.pack("<I", 3),
            struct.pack("<I", 1),
        ]
    )
    response.parameters["triton_final_response"].bool_param = final
    message = reply.SerializeToString()
    return b"\x00" + len(message).to_bytes(4, "big") + message


class _OneConnection:
    """A ``StreamTransport`` over the one in-memory connection the bench feeds."""

    def __init__(self, connection: GrpcConnection) -> None:
        self._connection = connection

    async def open(self, path: bytes, message: bytes, parse: Any, deadline: float | None = None) -> Any:
        return await self._connection.open(path, message, parse, deadline)

    async def close(self) -> None:
        pass


class _Backend(TritonBackend):
    def __init__(self, connection: GrpcConnection) -> None:
        super().__init__("bench:1", transport=_OneConnection(connection))
        self._stub = object()

    async def start(self) -> None:
        pass  # no control channel: nothing here makes a control call

    async def list_models(self) -> list[BackendModel]:
        return [BackendModel(name="firehose")]


class Service(NamedTuple):
    """What a request is prepared and served with, over one in-memory connection."""

    settings: Settings
    catalog: ModelCatalog
    service: CompletionService


async def service_over(connection: GrpcConnection) -> Service:
    """As the app runs it: the Triton client inside a replica pool (here of one), whose router
    and generator layer every request and batch pass through."""
    settings = Settings(log_requests=False)
    replica = _Backend(connection)
    router = Router(Policy(settings.routing_policy), settings.routing_prefix_chars, settings.routing_load_factor)
    backend = ReplicaPool(parse_endpoints("bench:1"), lambda address: replica, router)
    await backend._discover()
    catalog = ModelCatalog(backend, [], 3600)
    await catalog.refresh()
    admission = Admission(lambda model: settings.limits_for(model)[:2], settings.queue_timeout)
    return Service(settings, catalog, CompletionService(backend, admission, Metrics(admission, catalog.adapter_count)))


def stream_request(tokens: int) -> CompletionRequest:
    """A streamed completion of ``tokens`` tokens with usage."""
    return CompletionRequest(
        model="firehose",
        prompt="benchmark prompt",
        max_tokens=tokens,
        stream=True,
        stream_options={"include_usage": True},
    )


def token_messages(tokens: int) -> list[bytes]:
    """The gRPC messages of a ``tokens``-token stream, one token each, the last one final."""
    messages = [_response(b"tok ", False, b"None") for _ in range(tokens - 1)]
    messages.append(_response(b"tok ", True, b"length"))
    return messages


async def open_stream(setup: Service, body: CompletionRequest, number: int) -> tuple[StreamFrames, Any]:
    """Prepare, admit and start request ``number``; returns its frames and the pending first
    step. The call is opened: its HEADERS and DATA are in the connection's transport."""
    settings, catalog, service = setup
    plan = await prepare_completion(body, RequestContext(f"r{number}"), catalog, settings)
    outcome = service.outcome(plan)
    ticket = service.try_admit(plan, outcome)
    assert ticket is not None
    generation = service.generate(plan, ticket, outcome)
    stream = StreamFrames(plan, generation, asyncio.ensure_future(anext(generation)))
    first = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    return stream, first


async def read_stream(connection: GrpcConnection, stream: StreamFrames, first: Any, pieces: list[bytes]) -> bytes:
    """Feed the connection one piece per read (the first one brings the first step), taking a
    step after each, as under light load; returns the SSE bytes."""
    connection.data_received(pieces[0])
    out = [await first]
    for piece in pieces[1:]:
        connection.data_received(piece)
        try:
            out.append(await anext(stream))
        except StopAsyncIteration:
            break
    async for frame in stream:
        out.append(frame)
    return b"".join(out)


async def run(requests: int, tokens: int) -> tuple[float, float]:
    transport = _Transport()
    connection = GrpcConnection("bench:1", "http", None)
    connection.connection_made(transport)  # type: ignore[arg-type]
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    service = await service_over(connection)
    body = stream_request(tokens)
    frames_per_token = token_messages(tokens)
    elapsed = 0.0
    setup = 0.0
    for number in range(requests):
        mark = time.process_time()
        stream, first = await open_stream(service, body, number)
        setup += time.process_time() - mark
        server_events = server.receive_data(b"".join(transport.out))
        transport.out.clear()
        sid = next(e.stream_id for e in server_events if isinstance(e, h2.events.RequestReceived))
        server.send_headers(sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        wire = [server.data_to_send()]
        for message in frames_per_token:
            server.send_data(sid, message)
            wire.append(server.data_to_send())
        server.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
        wire[-1] += server.data_to_send()
        started = time.process_time()
        text = await read_stream(connection, stream, first, [wire[0] + wire[1], *wire[2:]])
        elapsed += time.process_time() - started
        assert text.count(b"tok ") == tokens and text.endswith(b"data: [DONE]\n\n"), text[-200:]
        server.receive_data(b"".join(transport.out))  # window updates, resets: keep the server in step
        transport.out.clear()
    per_token = elapsed / (requests * tokens) * 1e6
    per_request = setup / requests * 1e6
    return per_token, per_request


async def reassembly(size: int) -> float:
    """Milliseconds of loop time to receive one ``size``-byte message in 16 KiB frames."""
    transport = _Transport()
    connection = GrpcConnection("bench:1", "http", None, size + 1)
    connection._stream_window = 2 * size  # the whole message in flight at once
    connection.connection_made(transport)  # type: ignore[arg-type]
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    server.receive_data(b"".join(transport.out))
    transport.out.clear()
    call = await connection.open(b"/bench", b"", len)
    server.receive_data(b"".join(transport.out))
    transport.out.clear()
    server.send_headers(call.stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc")])
    connection.data_received(server.data_to_send())
    message = b"\x00" + size.to_bytes(4, "big") + b"m" * size
    frames = []
    for i in range(0, len(message), 16_384):
        server.send_data(call.stream_id, message[i : i + 16_384])
        frames.append(server.data_to_send())
    started = time.perf_counter()
    for frame in frames:
        connection.data_received(frame)
    elapsed = time.perf_counter() - started
    assert await anext(call) == [size]
    return elapsed * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = [asyncio.run(run(args.requests, args.tokens)) for _ in range(args.rounds)]
    tokens = [r[0] for r in results]
    print(
        f"per-token path: {min(tokens):.1f} µs/token (best of {args.rounds}; all: "
        + ", ".join(f"{t:.1f}" for t in tokens)
        + ")"
    )
    print(
        f"per request, before the first response (prepare, admit, open the call): {min(r[1] for r in results):.0f} µs"
    )
    for size in (1 << 20, 4 << 20):
        times = sorted(asyncio.run(reassembly(size)) for _ in range(args.rounds))
        print(
            f"one {size >> 20} MiB message in 16 KiB frames: {times[len(times) // 2]:.1f} ms median, "
            f"{times[0]:.1f} ms best of {args.rounds}"
        )


if __name__ == "__main__":
    main()
