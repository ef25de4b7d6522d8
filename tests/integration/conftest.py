"""Integration fixtures: one real tritonserver for the session, the gateway as a real HTTP server.

Triton serves the shipped reference repository (``triton_models/reference``: the tiny LM with its
LoRA adapters) and the test-only models in ``tests/triton_models`` (scripted replay, firehose, prefix_cache…).
The gateway runs as its own process, exactly as a user starts it, and tests reach it over HTTP
with the official ``openai`` SDK and raw ``httpx``. Nothing is skipped: if Triton cannot start,
the fixture fails loudly with its log.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from gateway.triton_launcher import TritonServer, free_port

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_REPOSITORY = ROOT / "triton_models" / "reference"
TEST_REPOSITORY = ROOT / "tests" / "triton_models"
MODEL = "tiny-llm"

TRANSPORT = os.environ.get("GATEWAY_TRITON_TRANSPORT", "h2")
"""What carries the gateways' token streams in this run. Every gateway process inherits the
environment, so ``GATEWAY_TRITON_TRANSPORT=aio`` runs the whole suite on grpc.aio
(scripts/test.sh runs it once per transport)."""
if TRANSPORT not in ("h2", "aio"):
    raise pytest.UsageError(f"GATEWAY_TRITON_TRANSPORT must be h2 or aio, not {TRANSPORT!r}")


def pytest_report_header() -> str:
    return f"gateway transport to Triton: {TRANSPORT}"


_STOPPING: list[threading.Thread] = []


def stop_in_background(*servers: TritonServer) -> None:
    """Stop Tritons a fixture or test is done with, without waiting for them: a Triton takes ~3 s
    to exit (it polls its models' unload once a second), which the next tests need not wait out.
    For a Triton whose port is reused at once, or whose end a test asserts, call ``stop()``."""
    for server in servers:
        thread = threading.Thread(target=server.stop, name="stop-tritonserver")
        thread.start()
        _STOPPING.append(thread)


@pytest.fixture(scope="session", autouse=True)
def _tritons_stopped() -> Iterator[None]:
    """Set up first, torn down last: every Triton stopped in the background has exited (and its
    stubs with it) before the session ends."""
    yield
    for thread in _STOPPING:
        thread.join()


@pytest.fixture(scope="session")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    extra = (f"--model-repository={TEST_REPOSITORY}",) if TEST_REPOSITORY.is_dir() else ()
    log = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    server = TritonServer(REFERENCE_REPOSITORY, log_file=log, extra_args=extra)
    server.start()
    yield server
    server.stop()


@dataclass
class GatewayProcess:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def answers_ok(url: str) -> bool:
    """Whether a GET of ``url`` answers 200 now (a gateway's ``/health/ready``); not listening yet
    is a no."""
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start_gateway(
    triton_url: str, log: Path, *extra: str, env: dict[str, str] | None = None, wait_ready: bool = True
) -> GatewayProcess:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "gateway",
        "--triton-url",
        triton_url,
        "--port",
        str(port),
        "--model-repository",
        f"{REFERENCE_REPOSITORY},{TEST_REPOSITORY}",
        "--log-level",
        "info",
        *extra,
    ]
    handle = open(log, "ab")  # noqa: SIM115 - lives as long as the process
    process = subprocess.Popen(
        command, stdout=handle, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=ROOT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    path = "/health/ready" if wait_ready else "/health"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gateway exited early:\n{log.read_text(errors='replace')}")
        if answers_ok(url + path):
            return GatewayProcess(url, process, log)
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"gateway not ready:\n{log.read_text(errors='replace')}")


def stop_gateway(gateway: GatewayProcess) -> None:
    if gateway.process.poll() is None:
        gateway.process.terminate()
        try:
            gateway.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            gateway.process.kill()


@pytest.fixture(scope="session")
def gateway(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = start_gateway(triton.grpc_url, tmp_path_factory.mktemp("gateway") / "gateway.log")
    yield process
    stop_gateway(process)


@pytest.fixture(scope="session")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


@pytest.fixture
async def async_client(gateway: GatewayProcess):  # type: ignore[no-untyped-def]
    sdk = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    yield sdk
    await sdk.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


_METRIC_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{[^}]*\})?\s+(?P<value>\S+)$")


def read_metric(metrics_url: str, name: str, default: float | None = None) -> float:
    """Sum of a metric's samples on a Prometheus text page (all label sets). A metric with no
    sample is an error, or ``default`` when one is given (a labelled series appears only once
    something set it)."""
    total, found = 0.0, False
    for line in httpx.get(metrics_url, timeout=5).text.splitlines():
        match = _METRIC_LINE.match(line)
        if match and match["name"] == name:
            total += float(match["value"])
            found = True
    if not found:
        if default is not None:
            return default
        raise AssertionError(f"metric {name} not on {metrics_url}")
    return total


def wait_for(predicate, timeout: float = 5.0, interval: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
