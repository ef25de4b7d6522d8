"""A real HTTP/2 gRPC server peer on loopback (the h2 library, server side) for the transport's
unit tests: it collects each call's request, then runs the test's script for it. GOAWAY frames
are written raw (``goaway``): h2 would refuse to send anything after its own, and a draining
server goes on serving the calls it took. ``MemoryPeer`` drives a connection in memory instead,
for frame sequences no server library would send and for exact control of what one read holds."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import h2.config
import h2.connection
import h2.events
import hpack
from hyperframe.frame import DataFrame, GoAwayFrame, HeadersFrame, RstStreamFrame

from gateway.backend.transport.h2 import GrpcConnection, H2Transport, Keepalive, connect
from gateway.backend.transport.h2frames import PREFACE

PATH = b"/inference.GRPCInferenceService/ModelStreamInfer"

Script = Callable[["Peer", int, bytes], Awaitable[None]]


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


class Peer(asyncio.Protocol):
    """Server side of one connection."""

    ack_data = True
    """Give received request bytes back to the client's send window (False: only what a test does)."""

    def __init__(self, script: Script, chop: int | None) -> None:
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.script = script
        self.chop = chop
        self.bodies: dict[int, bytes] = {}
        self.headers: dict[int, dict[bytes, bytes]] = {}
        self.resets: dict[int, int] = {}
        self.window_updates = 0
        self.ping_acks = 0
        self.data_frames: list[int] = []
        """The size of each DATA frame the client sent."""
        self.goaways: list[tuple[int, bytes]] = []
        """The client's GOAWAYs: error code, debug data."""
        self.transport: asyncio.Transport | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.h2.initiate_connection()
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)

    def data_received(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                self.headers[event.stream_id] = dict(event.headers)  # type: ignore[arg-type]
                self.bodies[event.stream_id] = b""
            elif isinstance(event, h2.events.DataReceived):
                self.bodies[event.stream_id] += event.data
                self.data_frames.append(event.flow_controlled_length)
                if self.ack_data:
                    self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                task = asyncio.ensure_future(self.script(self, event.stream_id, self.bodies[event.stream_id][5:]))
                self.tasks.add(task)
            elif isinstance(event, h2.events.StreamReset):
                self.resets[event.stream_id] = event.error_code
            elif isinstance(event, h2.events.WindowUpdated):
                self.window_updates += 1
            elif isinstance(event, h2.events.PingAckReceived):
                self.ping_acks += 1
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaways.append((event.error_code, event.additional_data or b""))
        self.flush()

    def flush(self) -> None:
        out = self.h2.data_to_send()
        if out and self.transport is not None and not self.transport.is_closing():
            if self.chop:  # deliver in tiny pieces: frames and messages split anywhere
                for i in range(0, len(out), self.chop):
                    self.transport.write(out[i : i + self.chop])
            else:
                self.transport.write(out)

    # -- what a script sends
    def respond(self, sid: int) -> None:
        self.h2.send_headers(sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        self.flush()

    def send(self, sid: int, data: bytes, **kwargs: Any) -> None:
        self.h2.send_data(sid, data, **kwargs)
        self.flush()

    def trailers(self, sid: int, status: int = 0, message: bytes = b"") -> None:
        headers = [(b"grpc-status", str(status).encode())] + ([(b"grpc-message", message)] if message else [])
        self.h2.send_headers(sid, headers, end_stream=True)
        self.flush()

    def goaway(self, last_stream_id: int, error_code: int = 0, debug: bytes = b"") -> None:
        self.flush()
        frame = GoAwayFrame(0, last_stream_id=last_stream_id, error_code=error_code, additional_data=debug)
        assert self.transport is not None
        self.transport.write(frame.serialize())

    def raw(self, data: bytes) -> None:
        """Bytes h2 would not send (a protocol violation, a frame on a stream it closed), after
        whatever h2 has queued."""
        self.flush()
        assert self.transport is not None
        self.transport.write(data)

    async def wait_ping_ack(self, count: int = 1) -> None:
        for _ in range(500):
            if self.ping_acks >= count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the client never answered the PING")


class Server:
    """A listening peer: every connection gets its own ``Peer``."""

    def __init__(self, script: Script, chop: int | None = None, peer: type[Peer] = Peer) -> None:
        self.script = script
        self.chop = chop
        self.peer = peer
        self.peers: list[Peer] = []
        self.server: asyncio.Server | None = None

    def factory(self) -> Peer:
        self.peers.append(self.peer(self.script, self.chop))
        return self.peers[-1]

    async def start(self, port: int = 0, ssl_context: ssl.SSLContext | None = None) -> str:
        self.server = await asyncio.get_running_loop().create_server(self.factory, "127.0.0.1", port, ssl=ssl_context)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for peer in self.peers:
            if peer.transport is not None:
                peer.transport.abort()


@asynccontextmanager
async def serve(
    script: Script, chop: int | None = None, keepalive: Keepalive | None = None, peer: type[Peer] = Peer, **kwargs: Any
) -> AsyncIterator[tuple[GrpcConnection, list[Peer]]]:
    server = Server(script, chop, peer)
    target = await server.start()
    connection = await connect(target, keepalive=keepalive, **kwargs)
    try:
        yield connection, server.peers
    finally:
        connection.close()
        server.close()


@asynccontextmanager
async def serve_transport(script: Script, **kwargs: Any) -> AsyncIterator[tuple[H2Transport, list[Peer]]]:
    server = Server(script)
    transport = H2Transport(await server.start(), **kwargs)
    try:
        yield transport, server.peers
    finally:
        await transport.close()
        server.close()


async def collect(call: AsyncIterator[list[bytes]]) -> list[bytes]:
    return [item async for batch in call for item in batch]


async def echo_three(peer: Peer, sid: int, request: bytes) -> None:
    peer.respond(sid)
    for i in range(3):
        peer.send(sid, grpc_message(request + b"-%d" % i))
    peer.trailers(sid)


async def answer_length(peer: Peer, sid: int, request: bytes) -> None:
    """Answers with the request's length: what reached the server, however it was cut."""
    peer.respond(sid)
    peer.send(sid, grpc_message(b"%d" % len(request)))
    peer.trailers(sid)


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


# -- the connection fed in memory: exact frames, no socket ------------------------------------


class Wire:
    """A ``GrpcConnection``'s transport in memory: what it writes is kept, and closing it (or
    aborting it) reports the connection lost on the next loop turn, as asyncio's transports do."""

    def __init__(self, connection: GrpcConnection) -> None:
        self.connection = connection
        self.out = bytearray()
        self.closing = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        assert not self.closing, "a write after close"
        self.out += data

    def get_extra_info(self, name: str) -> Any:
        return None

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self.connection.connection_lost, None)

    def abort(self) -> None:
        self.aborted = True
        self.close()


Frame = tuple[int, int, int, bytes]
"""A frame the client wrote: type, flags, stream id, payload."""


class MemoryPeer:
    """The server side of a ``GrpcConnection`` driven in memory: the test writes the server's
    frames as bytes (hyperframe), so any sequence at all can be fed, in one read or several."""

    def __init__(self, connection: GrpcConnection | None = None) -> None:
        self.connection = connection or GrpcConnection("peer:1", "http")
        self.wire = Wire(self.connection)
        self.connection.connection_made(self.wire)  # type: ignore[arg-type]
        self.encoder = hpack.Encoder()

    def feed(self, *frames: bytes) -> None:
        """Everything in one ``data_received``, as one read from the socket."""
        self.connection.data_received(b"".join(frames))

    def sent(self) -> list[Frame]:
        out, pos, frames = bytes(self.wire.out), len(PREFACE), []
        while pos + 9 <= len(out):
            length = int.from_bytes(out[pos : pos + 3], "big")
            sid = int.from_bytes(out[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
            frames.append((out[pos + 3], out[pos + 4], sid, out[pos + 9 : pos + 9 + length]))
            pos += 9 + length
        return frames

    def goaway(self) -> tuple[int, bytes] | None:
        """The client's GOAWAY: error code, debug data (None if it sent none)."""
        for kind, _, _, payload in self.sent():
            if kind == GoAwayFrame.type:
                return int.from_bytes(payload[4:8], "big"), payload[8:]
        return None

    def resets(self) -> dict[int, int]:
        return {sid: int.from_bytes(p, "big") for kind, _, sid, p in self.sent() if kind == RstStreamFrame.type}

    def headers(self, sid: int, headers: list[tuple[bytes, bytes]], *flags: str) -> bytes:
        return HeadersFrame(sid, self.encoder.encode(headers), flags=["END_HEADERS", *flags]).serialize()

    def respond(self, sid: int) -> bytes:
        return self.headers(sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])

    def trailers(self, sid: int, status: int = 0) -> bytes:
        return self.headers(sid, [(b"grpc-status", b"%d" % status)], "END_STREAM")


def data(sid: int, payload: bytes, *flags: str) -> bytes:
    return DataFrame(sid, payload, flags=list(flags)).serialize()


def assert_clean(connection: GrpcConnection) -> None:
    """No stream left behind: no call tracked, no request bytes queued, no caller waiting."""
    assert connection.calls == 0
    assert not connection._unsent and not connection._send_windows and not connection._slots
