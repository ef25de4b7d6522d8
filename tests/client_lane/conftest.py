"""The client lane: agent frameworks' default paths, through the real libraries, against the
gateway's embedded default. Run it with ``bash scripts/client-lane.sh`` (docs/CLIENT_LANE.md).

The lane's clients live in their own venv (``.venv-clients``), so the main suite does not collect
it: without ``CLIENT_LANE=1`` (set by the script) the test files here are ignored and the run says
why. The gateway runs from the main venv (``CLIENT_LANE_GATEWAY_PYTHON``, default
``.venv/bin/python``): ``python -m gateway --embedded``, once per session, on a free port.
``CLIENT_LANE_GATEWAY_URL`` points the tests at a gateway already running instead.

tiny-llm's weights are random: its free text is gibberish, so no test reads it. What is valid
(tool calls naming the given tool with arguments in its schema, structured outputs) is valid
because the gateway enforced it while the model generated.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.client_lane.common import REASONING_OUTPUTS, SCRIPTED, reasoning_model

LANE_ON = os.environ.get("CLIENT_LANE") == "1"
OFF_REASON = "tests/client_lane not collected: it needs the client lane's venv; run `bash scripts/client-lane.sh`"
ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 300.0

if not LANE_ON:
    collect_ignore_glob = ["test_*.py"]

_notes: list[str] = []
_gateway_logs: list[Path] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not LANE_ON:
        terminalreporter.write_line(OFF_REASON)
    for line in _notes:
        terminalreporter.write_line(line)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _scripted_copies(repository: Path) -> Path:
    """A model repository serving the scripted model again under each other parser's name: its
    config and code linked, its ``model.json`` naming the tokenizer by absolute path."""
    source = ROOT / "tests" / "triton_models" / SCRIPTED
    model_json = json.loads((source / "1" / "model.json").read_text())
    model_json["model"] = str((source / "1" / model_json["model"]).resolve())
    for parser in REASONING_OUTPUTS:
        name = reasoning_model(parser)
        if name == SCRIPTED:
            continue
        version = repository / name / "1"
        version.mkdir(parents=True)
        (repository / name / "config.pbtxt").symlink_to(source / "config.pbtxt")
        for code in ("model.py", "replay.py"):
            (version / code).symlink_to(source / "1" / code)
        (version / "model.json").write_text(json.dumps(model_json))
    return repository


@pytest.fixture(scope="session")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway's base URL (no ``/v1``), ready: ``/health/ready`` answered 200."""
    given = os.environ.get("CLIENT_LANE_GATEWAY_URL")
    if given:
        yield given.rstrip("/")
        return
    python = Path(os.environ.get("CLIENT_LANE_GATEWAY_PYTHON", ".venv/bin/python"))
    if not python.is_absolute():
        python = ROOT / python
    workdir = tmp_path_factory.mktemp("gateway")
    log_path = workdir / "gateway.log"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    # The responses store (on by default, SQLite under $XDG_STATE_HOME) goes to the session's
    # temporary directory, not the user's state directory.
    env = {**os.environ, "XDG_STATE_HOME": str(workdir / "state")}
    # --log-requests: a JSON line per generation with its final status (``gateway_log``).
    command = [str(python), "-m", "gateway", "--embedded", "--port", str(port), "--log-requests"]
    command += ["--triton-log-file", str(workdir / "triton.log")]
    # Beside tiny-llm, the test models: the scripted one replays what a reasoning model writes,
    # served once per reasoning parser (each set as a user would set it).
    copies = _scripted_copies(workdir / "reasoning-models")
    command += ["--model-repository", f"triton_models/reference,tests/triton_models,{copies}"]
    parsers = {reasoning_model(parser): {"reasoning_parser": parser} for parser in REASONING_OUTPUTS}
    command += ["--model-files", json.dumps(parsers)]
    started = time.monotonic()
    _gateway_logs.append(log_path)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"the gateway exited with {process.returncode} before it was ready:\n{_tail(log_path)}")
            try:
                if httpx.get(url + "/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - started > READY_TIMEOUT:
                pytest.fail(f"the gateway was not ready in {READY_TIMEOUT:.0f} s:\n{_tail(log_path)}")
            time.sleep(0.5)
        _notes.append(f"client lane: gateway ready in {time.monotonic() - started:.0f} s; its log: {log_path}")
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture(scope="session")
def base_url(gateway_url: str) -> str:
    """The OpenAI base URL the clients take."""
    return gateway_url + "/v1"


@pytest.fixture(scope="session")
def gateway_log(gateway_url: str) -> Path | None:
    """The gateway's log, with a ``gateway.access`` JSON line per generation (``--log-requests``):
    the lane's own gateway's, or ``CLIENT_LANE_GATEWAY_LOG`` beside ``CLIENT_LANE_GATEWAY_URL``
    (None when that is not given)."""
    if os.environ.get("CLIENT_LANE_GATEWAY_URL"):
        given = os.environ.get("CLIENT_LANE_GATEWAY_LOG")
        return Path(given) if given else None
    return _gateway_logs[-1]
