"""The embedded launcher's wait for Triton: bounded by ``triton_start_timeout``, and saying how
long it has waited while it waits (a real model takes minutes to load)."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import triton_launcher
from gateway.cli import build_parser
from gateway.config import Settings
from gateway.triton_launcher import TritonLaunchError, TritonServer


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_server_that_never_gets_ready_is_reported_while_waited_for_then_given_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(triton_launcher, "READY_REPORT_EVERY", 0.2)
    server = TritonServer(tmp_path, log_file=tmp_path / "triton.log", ready_timeout=1.0, http_port=unused_port())
    never_ready = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # noqa: S603
    server._process = never_ready
    try:
        with caplog.at_level(logging.INFO, logger="gateway.triton_launcher"), pytest.raises(TritonLaunchError) as info:
            server._wait_ready()
    finally:
        never_ready.kill()
        never_ready.wait()
    assert "not ready after 1.0s" in str(info.value)
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for tritonserver")]
    assert 3 <= len(waits) <= 5
    assert waits[0].startswith("waiting for tritonserver to be ready: 0 s of at most 1 s")


def test_the_wait_is_a_setting_with_a_flag_and_a_default_fit_for_real_models() -> None:
    assert Settings().triton_start_timeout == 600.0
    assert build_parser().parse_args(["--triton-start-timeout", "900"]).triton_start_timeout == "900"


def test_something_else_answering_on_the_port_is_not_ready_not_a_crash(tmp_path: Path) -> None:
    """Another process may take Triton's port before Triton binds it (vLLM's engine binds ports
    of its own while it loads): its bytes are not HTTP, and the wait goes on (Triton then exits on
    the taken port, and the launcher starts it again on fresh ones)."""
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def answer_garbage() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.sendall(b"\xff\xff\xff\x00\x00\x00\x00\xff\r\n\r\n")

    thread = threading.Thread(target=answer_garbage, daemon=True)
    thread.start()
    server = TritonServer(tmp_path, log_file=tmp_path / "t.log", ready_timeout=0.8, http_port=listener.getsockname()[1])
    never_ready = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # noqa: S603
    server._process = never_ready
    try:
        with pytest.raises(TritonLaunchError, match="not ready after"):
            server._wait_ready()
    finally:
        stop.set()
        thread.join()
        listener.close()
        never_ready.kill()
        never_ready.wait()
