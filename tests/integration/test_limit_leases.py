"""A key's ``max_concurrent`` slots as leases, over real HTTP: a gateway killed (SIGKILL) with
streams in flight gives their slots back to the other gateways within the lease's ttl
(``--key-limits-lease-ttl``), through a real Redis and through the workers' shared SQLite file,
and keeps them while it lives, past the ttl. A busy key limits file (another process holding its
lock) is a 503 ``rate_limiter_unavailable`` when failing closed and admitted when open, never a
500; and the counting endpoints count against the key's ``rpm``."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.keys.policy import hash_key
from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway, wait_for
from tests.redis_server import RedisServer

SCRIPTED = "scripted"
TTL = 3.0
"""The lease ttl here: short, and three renewals of one second each inside it."""
SLACK = 8.0
"""Seconds past the ttl the slots may take to be seen free on a busy machine."""


def script(responses: int, delay: float = 0.0) -> str:
    return json.dumps({"responses": [{"utf8": ["tok "], "delay": delay} for _ in range(responses)]})


def write_keys(path: Path, rules: str) -> Path:
    path.write_text(f'[[key]]\nname = "lease-team"\nsha256 = "{hash_key("sk-lease")}"\n{rules}\n')
    return path


def complete(gateway: GatewayProcess, path: str = "/v1/completions") -> httpx.Response:
    body = {"model": SCRIPTED, "prompt": script(2)}
    if path != "/v1/completions":
        body = {"model": SCRIPTED, "prompt": "hello"}
    return httpx.post(gateway.url + path, json=body, headers={"Authorization": "Bearer sk-lease"}, timeout=30)


class HeldStream(threading.Thread):
    """A long stream of the key's, read until its gateway dies."""

    def __init__(self, gateway: GatewayProcess) -> None:
        super().__init__(daemon=True)
        self.gateway = gateway
        self.started = threading.Event()
        self.status = 0

    def run(self) -> None:
        body = {"model": SCRIPTED, "prompt": script(600, delay=0.05), "stream": True}
        headers = {"Authorization": "Bearer sk-lease"}
        try:
            with httpx.stream(
                "POST", self.gateway.url + "/v1/completions", json=body, headers=headers, timeout=60
            ) as response:
                self.status = response.status_code
                self.started.set()
                for _ in response.iter_lines():
                    pass
        except httpx.HTTPError:
            pass  # its gateway was killed
        finally:
            self.started.set()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


def shared_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[str]:
    if kind == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return ["--key-limits-redis-url", server.url]
    return ["--key-limits-file", str(tmp_path / "limits.sqlite")]


@pytest.mark.parametrize("kind", ["redis", "file"])
def test_a_killed_gateway_gives_its_keys_slots_back_within_the_lease_ttl(
    triton: TritonServer, tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    keys = write_keys(tmp_path / "keys.toml", "max_concurrent = 2")
    common = [
        "--api-key-policy-file",
        str(keys),
        "--key-limits-lease-ttl",
        str(TTL),
        *shared_store(kind, tmp_path, request),
    ]
    doomed = start_gateway(triton.grpc_url, tmp_path / "doomed.log", *common)
    survivor = start_gateway(triton.grpc_url, tmp_path / "survivor.log", *common)
    streams = [HeldStream(doomed) for _ in range(2)]
    try:
        for stream in streams:
            stream.start()
            assert stream.started.wait(30) and stream.status == 200
        full = complete(survivor)
        assert full.status_code == 429 and "concurrent requests" in full.json()["error"]["message"]
        time.sleep(TTL + 1)  # past the first leases' expiry: the live gateway renewed them
        assert complete(survivor).status_code == 429

        doomed.process.kill()
        doomed.process.wait(10)
        killed = time.monotonic()
        assert wait_for(lambda: complete(survivor).status_code == 200, timeout=TTL + 60, interval=0.1)
        waited = time.monotonic() - killed
        assert waited <= TTL + SLACK, f"the slots came back after {waited:.1f} s; the bound is the ttl ({TTL} s)"
        assert "Traceback" not in survivor.log_text()
    finally:
        stop_gateway(doomed)
        stop_gateway(survivor)
        for stream in streams:
            stream.join(30)


def test_a_busy_key_limits_file_is_a_503_when_closed_and_admitted_when_open(
    triton: TritonServer, tmp_path: Path
) -> None:
    keys = write_keys(tmp_path / "keys.toml", "rpm = 1000")
    limits = tmp_path / "limits.sqlite"
    common = ["--api-key-policy-file", str(keys), "--key-limits-file", str(limits)]
    closed = start_gateway(triton.grpc_url, tmp_path / "closed.log", *common, "--key-limits-redis-failure", "closed")
    opened = start_gateway(triton.grpc_url, tmp_path / "open.log", *common)
    try:
        assert complete(closed).status_code == 200  # the file exists, in WAL mode
        locker = sqlite3.connect(limits, isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")  # another process holds the file's write lock
        try:
            refused = complete(closed)
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "rate_limiter_unavailable"
            assert refused.headers["retry-after"] == "1"
            admitted = complete(opened)
            assert admitted.status_code == 200 and "x-ratelimit-limit-requests" not in admitted.headers
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        assert complete(closed).status_code == 200
        assert "unreachable" in opened.log_text()
        page = httpx.get(closed.url + "/metrics", headers={"Authorization": "Bearer sk-lease"}, timeout=10).text
        assert 'gateway_key_limits_failures_total{step="admit"}' in page
        assert "Traceback" not in closed.log_text() + opened.log_text()
    finally:
        stop_gateway(closed)
        stop_gateway(opened)


def test_counting_endpoints_count_against_the_keys_rpm(triton: TritonServer, tmp_path: Path) -> None:
    keys = write_keys(tmp_path / "keys.toml", "rpm = 3")
    gateway = start_gateway(triton.grpc_url, tmp_path / "gateway.log", "--api-key-policy-file", str(keys))
    try:
        left = 60 - time.time() % 60
        if left < 8:  # a fresh minute, so that the window cannot turn while it counts
            time.sleep(left + 0.05)
        answers = [complete(gateway, "/tokenize") for _ in range(2)] + [complete(gateway), complete(gateway)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        assert answers[0].headers["x-ratelimit-remaining-requests"] == "2"
        assert complete(gateway, "/tokenize").status_code == 429
    finally:
        stop_gateway(gateway)
