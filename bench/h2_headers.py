"""What a call's HTTP/2 costs the client, in one process, alternating, best of 5 rounds: the
gateway's own ``GrpcConnection`` (``gateway/backend/transport/h2conn.py``) with its HPACK caches,
the same with plain ``hpack`` coders, and the h2 library it replaced.

One call is: the request's HEADERS and DATA frames made, then the response's HEADERS frame and its
trailers read (the bytes a gRPC server sends, made once by an h2 server connection). Messages in
between are left out: DATA frames never went through h2 (docs/PERFORMANCE.md).

    .venv/bin/python bench/h2_headers.py
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import hpack

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.backend.transport import h2conn
from gateway.backend.transport.h2headers import call_headers

PATH = b"/inference.GRPCInferenceService/ModelStreamInfer"
CALL = call_headers(b"http", b"127.0.0.1:8001", PATH)
RESPONSE = [(b":status", b"200"), (b"content-type", b"application/grpc")]
TRAILERS = [(b"grpc-status", b"0")]
CALLS = 2000
_WINDOW_BACK = b"\x00\x00\x04\x08\x00\x00\x00\x00\x00" + (405).to_bytes(4, "big")
"""The connection's send window, given back after each call, as a server that reads does."""


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str) -> Any:
        return None


class _PlainDecoder(hpack.Decoder):
    def decode_block(self, block: bytes) -> list[tuple[bytes, bytes]]:
        return [(bytes(n), bytes(v)) for n, v in self.decode(block, raw=True)]


def _server_frames(calls: int) -> list[tuple[bytes, bytes]]:
    """Each call's response HEADERS frame and trailers frame, as an h2 server encodes them in order
    on one connection (the first call's literals, then index references)."""
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    server.data_to_send()
    frames = []
    for i in range(calls):
        sid = 1 + 2 * i
        client.send_headers(sid, CALL, end_stream=True)
        server.receive_data(client.data_to_send())
        server.send_headers(sid, RESPONSE)
        head = server.data_to_send()
        server.send_headers(sid, TRAILERS, end_stream=True)
        frames.append((head, server.data_to_send()))
    return frames


async def ours(frames: list[tuple[bytes, bytes]], cached: bool) -> float:
    connection = h2conn.GrpcConnection("127.0.0.1:8001", "http")
    connection.connection_made(_Transport())  # type: ignore[arg-type]
    if not cached:
        connection._encoder = hpack.Encoder()  # type: ignore[assignment]
        connection._decoder = _PlainDecoder()  # type: ignore[assignment]
    spent = 0.0
    for head, trailers in frames:
        started = time.perf_counter()
        await connection.open(PATH, b"x" * 400, bytes)
        connection.data_received(head)
        connection.data_received(trailers)
        spent += time.perf_counter() - started
        connection.data_received(_WINDOW_BACK)
    return spent / len(frames) * 1e6


def through_h2(frames: list[tuple[bytes, bytes]]) -> float:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    conn.data_to_send()
    spent = 0.0
    for head, trailers in frames:
        started = time.perf_counter()
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, CALL)
        conn.send_data(sid, b"x" * 405, end_stream=True)
        conn.data_to_send()
        conn.receive_data(head)
        conn.receive_data(trailers)
        spent += time.perf_counter() - started
        conn.receive_data(_WINDOW_BACK)
    return spent / len(frames) * 1e6


def main() -> None:
    frames = _server_frames(CALLS)
    results: dict[str, list[float]] = {"gateway, HPACK caches": [], "gateway, plain hpack": [], "h2 library": []}
    for _ in range(5):
        results["gateway, HPACK caches"].append(asyncio.run(ours(frames, cached=True)))
        results["gateway, plain hpack"].append(asyncio.run(ours(frames, cached=False)))
        results["h2 library"].append(through_h2(frames))
    for label, values in results.items():
        every = ", ".join(f"{v:.1f}" for v in values)
        print(f"{label:<22} one call's HTTP/2: {min(values):.1f} µs best of 5 (all: {every})")


if __name__ == "__main__":
    main()
