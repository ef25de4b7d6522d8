"""The embedded Triton never outlives ``python -m gateway --embedded``, however the gateway ends.

Each test starts the gateway as a user would, with ``TMPDIR`` set to the test's own directory: the
launcher's working directory (Triton's backend directory, the stubs' binary) lands there, so the
test finds every tritonserver and stub process of *its* run in ``/proc`` by that path, without
touching the Tritons other tests or other users run on the machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.triton_launcher import SHARED_MEMORY, TritonServer, free_port
from tests.integration.conftest import ROOT, answers_ok, wait_for

SLOW_REPOSITORY = ROOT / "tests" / "triton_models_slow"  # slow_load: sleeps in initialize
PROBE_MODEL = ROOT / "tests" / "triton_models_locale" / "locale_probe"  # loads in about a second
CRASH_REPOSITORY = ROOT / "tests" / "triton_models_crash"  # crash_on_load: aborts tritonserver N times
TRITON_PROCESSES = {"tritonserver", "triton_python_backend_stub"}


def triton_processes(marker: Path) -> list[int]:
    """Live (not zombie) tritonserver and stub processes whose command line mentions ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # exited while we looked
            continue
        if os.path.basename(argv[0]).decode(errors="replace") in TRITON_PROCESSES and state != "Z":
            if any(str(marker).encode() in arg for arg in argv):
                found.append(int(entry.name))
    return found


def start_embedded(
    tmp_path: Path, repository: Path, port: int | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "gateway", "--embedded", "--port", str(port or free_port())]
    command += ["--model-repository", str(repository), "--log-level", "info"]
    with open(tmp_path / "gateway.log", "wb") as log:
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "TMPDIR": str(tmp_path), **(env or {})},
        )


def log_of(tmp_path: Path) -> str:
    return (tmp_path / "gateway.log").read_text(errors="replace")


def stub_is_loading(tmp_path: Path) -> bool:
    return any("stub" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace") for pid in triton_processes(tmp_path))


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    """The test's directory; whatever Triton process of the run a failing test leaves is killed."""
    yield tmp_path
    for pid in triton_processes(tmp_path):
        os.kill(pid, signal.SIGKILL)


def assert_nothing_left(tmp_path: Path) -> None:
    """The stubs notice their parent died and exit by themselves (measured: under 2 s)."""
    left = triton_processes(tmp_path)
    if not wait_for(lambda: not triton_processes(tmp_path), timeout=10, interval=0.1):
        pytest.fail(f"tritonserver/stub processes {left} outlived the gateway:\n{log_of(tmp_path)}")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["TERM", "INT"])
def test_signal_while_triton_loads_stops_it_and_exits_nonzero(run_dir: Path, signum: signal.Signals, code: int) -> None:
    tmp_path = run_dir
    process = start_embedded(tmp_path, SLOW_REPOSITORY)
    try:
        assert wait_for(lambda: stub_is_loading(tmp_path), timeout=60, interval=0.1), log_of(tmp_path)
        sent = time.monotonic()
        process.send_signal(signum)
        assert process.wait(timeout=15) == code, log_of(tmp_path)
        assert time.monotonic() - sent < 10, "the gateway took too long to stop a loading Triton"
        assert "Triton was still starting; stopped it" in log_of(tmp_path)
        assert f"interrupted by {signum.name}" in log_of(tmp_path)
    finally:
        if process.poll() is None:
            process.kill()
    assert_nothing_left(tmp_path)


def test_sigkill_of_a_ready_gateway_takes_triton_and_its_stubs_down(run_dir: Path) -> None:
    tmp_path = run_dir
    repository = tmp_path / "repository"
    shutil.copytree(PROBE_MODEL, repository / PROBE_MODEL.name)
    port = free_port()
    process = start_embedded(tmp_path, repository, port)
    try:
        assert wait_for(lambda: gateway_ready(port), timeout=60, interval=0.2), log_of(tmp_path)
        running = triton_processes(tmp_path)
        assert len(running) == 2, running  # tritonserver and the probe's stub
    finally:
        process.kill()
    process.wait()
    assert_nothing_left(tmp_path)


def test_gateway_failing_after_triton_started_stops_it(run_dir: Path) -> None:
    """The port is taken: uvicorn gives up after Triton is up, and Triton goes with it."""
    tmp_path = run_dir
    repository = tmp_path / "repository"
    shutil.copytree(PROBE_MODEL, repository / PROBE_MODEL.name)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        process = start_embedded(tmp_path, repository, taken.getsockname()[1])
        try:
            assert process.wait(timeout=60) != 0, log_of(tmp_path)
        finally:
            if process.poll() is None:
                process.kill()
    assert "embedded Triton ready" in log_of(tmp_path)
    assert_nothing_left(tmp_path)


def test_a_picked_port_taken_before_triton_binds_it_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race a port picker cannot avoid (vLLM's engine binds ports of its own while it loads
    # beside Triton): the first port handed out is already listened on when Triton starts.
    import gateway.triton_launcher as launcher

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        monkeypatch.setattr(launcher, "free_port", lambda: next(ports, None) or free_port())
        repository = tmp_path / "repository"  # a model that loads in about a second: only ports matter here
        shutil.copytree(PROBE_MODEL, repository / PROBE_MODEL.name)
        server = launcher.TritonServer(repository, log_file=tmp_path / "triton.log")
        server.start()
        try:
            assert server.grpc_port != taken.getsockname()[1]
            assert "already in use" in (tmp_path / "triton.log").read_text(errors="replace")
            assert httpx.get(f"http://127.0.0.1:{server.http_port}/v2/health/ready", timeout=5).status_code == 200
        finally:
            server.stop()


def shm_prefix_of(pids: list[int]) -> str:
    """The Python backend's region prefix on the command line of the tritonserver among ``pids``."""
    for pid in pids:
        for arg in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0"):
            if "shm-region-prefix-name=" in arg:
                return arg.split("shm-region-prefix-name=", 1)[1]
    raise AssertionError(f"no shm-region-prefix-name among {pids}'s command lines")


def gateway_ready(port: int) -> bool:
    return answers_ok(f"http://127.0.0.1:{port}/health/ready")


def test_a_triton_that_crashes_while_it_starts_is_started_again(run_dir: Path) -> None:
    """Triton 2.51's Python backend now and then aborts while several models load (CI saw a
    ``boost::interprocess::lock_exception``); the model here aborts its tritonserver the same way,
    once. The embedded gateway comes up on the second start, and says why it took two."""
    tmp_path = run_dir
    counter = tmp_path / "crashes"
    port = free_port()
    env = {"CRASH_ON_LOAD_COUNTER": str(counter), "CRASH_ON_LOAD_TIMES": "1"}
    process = start_embedded(tmp_path, CRASH_REPOSITORY, port, env)
    try:
        wait_for(lambda: gateway_ready(port) or process.poll() is not None, timeout=90, interval=0.2)
        assert gateway_ready(port), log_of(tmp_path)
        assert counter.read_text() == "1"
        assert "tritonserver crashed while it started" in log_of(tmp_path)
        running = triton_processes(tmp_path)
        assert len(running) == 2  # the second tritonserver and its stub; the first's are gone
        # The crashed Triton's shared-memory region is gone too: only the running stub's is left.
        prefix = shm_prefix_of(running)
        assert len(list(SHARED_MEMORY.glob(f"{prefix}*"))) == 1
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert_nothing_left(tmp_path)
    assert not list(SHARED_MEMORY.glob(f"{prefix}*"))


@pytest.mark.parametrize(
    ("signame", "starts"),
    [("SIGABRT", 3), ("SIGKILL", 1)],
    ids=["a crash is tried three times", "a kill from outside once"],
)
def test_a_triton_that_dies_at_every_start_is_given_up(run_dir: Path, signame: str, starts: int) -> None:
    """A crash that repeats is not retried forever: three starts, then an error naming the signal.
    SIGKILL (what the OOM killer sends) is not retried at all: the same load would meet it again."""
    tmp_path = run_dir
    counter = tmp_path / "crashes"
    env = {"CRASH_ON_LOAD_COUNTER": str(counter), "CRASH_ON_LOAD_TIMES": "5", "CRASH_ON_LOAD_SIGNAL": signame}
    process = start_embedded(tmp_path, CRASH_REPOSITORY, env=env)
    try:
        assert process.wait(timeout=120) == 2, log_of(tmp_path)
    finally:
        if process.poll() is None:
            process.kill()
    assert counter.read_text() == str(starts)
    assert log_of(tmp_path).count("tritonserver crashed while it started") == starts - 1
    assert f"killed by {signame}" in log_of(tmp_path)
    assert_nothing_left(tmp_path)


def test_a_killed_triton_leaves_no_shared_memory_behind(tmp_path: Path) -> None:
    """Triton removes its Python-backend regions in ``/dev/shm`` only when it shuts down in order;
    a killed one (a test's ``kill``, a crash, the OOM killer) leaves them, 1 MiB or more each.
    The launcher names them, and removes what is left once the process group is gone."""
    repository = tmp_path / "repository"
    shutil.copytree(PROBE_MODEL, repository / PROBE_MODEL.name)
    server = TritonServer(repository, log_file=tmp_path / "triton.log").start()
    try:
        regions = list(SHARED_MEMORY.glob(f"{server.shm_prefix}*"))
        assert len(regions) == 1, regions  # the probe model's one instance
        server.kill()
        assert regions[0].exists()  # Triton did not remove it: it was killed
    finally:
        server.stop()
    assert not list(SHARED_MEMORY.glob(f"{server.shm_prefix}*"))
