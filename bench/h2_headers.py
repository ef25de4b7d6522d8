"""What opening a call costs in h2 (``send_headers``) with hpack's encoder and with the
per-connection block cache (``gateway/backend/transport/h2headers.py``), in one process,
alternating, best of 5 rounds.

    .venv/bin/python bench/h2_headers.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import h2.config
import h2.connection

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.backend.transport.h2headers import RepeatingHeadersEncoder, call_headers, client_config

CALL = call_headers(b"http", b"127.0.0.1:8001", b"/inference.GRPCInferenceService/ModelStreamInfer")
CALLS = 2000


def connection(cached: bool) -> h2.connection.H2Connection:
    """Configured as ``GrpcConnection`` configures its own."""
    conn = h2.connection.H2Connection(client_config())
    if cached:
        conn.encoder = RepeatingHeadersEncoder()
    conn.initiate_connection()
    conn.data_to_send()
    return conn


def one_round(cached: bool) -> float:
    conn = connection(cached)
    spent = 0.0
    for _ in range(CALLS):
        started = time.perf_counter()
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, CALL)
        conn.data_to_send()
        spent += time.perf_counter() - started
        conn.reset_stream(sid)  # ends the stream, as a finished call does
        conn.data_to_send()
    return spent / CALLS * 1e6


def main() -> None:
    results: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(5):
        for cached in (False, True):
            results[cached].append(one_round(cached))
    for cached, label in ((False, "hpack encoder"), (True, "cached block")):
        values = results[cached]
        every = ", ".join(f"{v:.1f}" for v in values)
        print(f"{label:<14} send_headers: {min(values):.1f} µs best of 5 (all: {every})")


if __name__ == "__main__":
    main()
