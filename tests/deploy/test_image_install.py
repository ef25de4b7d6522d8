"""The image's install, without Docker: the Dockerfile's build stage, replayed on this machine.

The build context is rebuilt from the Dockerfile's own COPY lines, then
``deploy/docker/install-gateway.sh`` (the script the Dockerfile runs) builds the wheel and
installs it with the ``speed`` and ``postgres`` extras into a fresh venv. That venv must hold no
torch and no Triton, must open the responses store on a SQLite file and on a real PostgreSQL
server (``tests/postgres.py``) with the driver it carries, and its ``triton-openai-gateway`` must
serve a chat completion from a real tritonserver running the reference model.
"""

from __future__ import annotations

import glob
import http.client
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.triton_launcher import TritonServer, free_port
from tests.postgres import PostgresServer, start_postgres, stop_postgres

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
INSTALL_SCRIPT = REPO_ROOT / "deploy" / "docker" / "install-gateway.sh"
REFERENCE_MODELS = REPO_ROOT / "triton_models" / "reference"
MODEL = "tiny-llm"


def _instructions(stage: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of one Dockerfile stage, continuation lines joined."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out: list[tuple[str, str]] = []
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            current = rest.split()[-1] if " AS " in rest.upper() else None
            continue
        if current == stage:
            out.append((word.upper(), rest.strip()))
    return out


def _build_context(dest: Path) -> tuple[Path, list[str]]:
    """Copy what the build stage's COPY lines copy (globs as Docker expands them); return the
    source directory and the install command's arguments."""
    workdir = "/"
    src_root: Path | None = None
    install_args: list[str] = []
    for instruction, args in _instructions("build"):
        if instruction == "WORKDIR":
            workdir = args
            src_root = dest / workdir.lstrip("/")
            src_root.mkdir(parents=True, exist_ok=True)
        elif instruction == "COPY":
            *sources, target = shlex.split(args)
            assert not any(s.startswith("--") for s in sources), "build-stage COPY flags are not replayed"
            if not target.startswith("/"):
                target = f"{workdir.rstrip('/')}/{target}"
            if target.startswith("/usr/local/bin/"):
                continue  # the install script: run from the repository below
            for pattern in sources:
                for found in sorted(glob.glob(str(REPO_ROOT / pattern))):
                    path = Path(found)
                    goal = dest / target.lstrip("/")
                    if target.endswith("/"):
                        goal = goal / path.name
                    if path.is_dir():
                        shutil.copytree(
                            path, goal, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
                        )  # as .dockerignore
                    else:
                        goal.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(path, goal)
        elif instruction == "RUN" and args.startswith("install-gateway "):
            install_args = shlex.split(args)[1:]
    assert src_root is not None and install_args, "the Dockerfile's build stage no longer runs install-gateway"
    assert len(install_args) == 3, "install-gateway takes SOURCE_DIR VENV_DIR WHEEL_DIR"
    assert install_args[0] == workdir, "install-gateway must build the copied source"
    return src_root, install_args


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("image")
    source, args = _build_context(root / "context")
    _, venv_dir, wheel_dir = args
    venv = root / venv_dir.lstrip("/")
    wheels = root / wheel_dir.lstrip("/")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    env["PYTHON"] = sys.executable
    started = time.monotonic()
    result = subprocess.run(
        ["sh", str(INSTALL_SCRIPT), str(source), str(venv), str(wheels)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,  # a pip install, slow beside the integration tests on a loaded machine
        check=False,
    )
    assert result.returncode == 0, f"install failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    print(f"image venv installed in {time.monotonic() - started:.1f} s")
    return venv


def _venv_python(venv: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=venv,
        env={"PATH": os.environ.get("PATH", "")},
        timeout=60,
        check=False,
    )


def test_image_venv_has_the_runtime_dependencies_and_no_torch_or_triton(image_venv: Path) -> None:
    ok = _venv_python(
        image_venv,
        "import gateway, fastapi, uvicorn, tritonclient.grpc.aio, tokenizers, uvloop, httptools, "
        "aiosqlite, psycopg, psycopg_pool, opentelemetry.sdk.trace, opentelemetry.exporter.otlp.proto.http; "
        "print(gateway.__file__)",
    )
    assert ok.returncode == 0, ok.stderr
    assert str(image_venv) in ok.stdout, "the gateway must come from the installed wheel, not the work tree"
    package = Path(ok.stdout.strip()).parent
    assert not [p.name for p in package.rglob("*.so")], "the gateway is pure Python"
    for module in ("torch", "transformers", "pytriton", "tritonserver", "vllm", "mypy"):
        probe = _venv_python(image_venv, f"import {module}")
        assert probe.returncode != 0, f"{module} is importable in the image venv"
    assert not (image_venv / "bin" / "tritonserver").exists()
    assert (image_venv / "bin" / "triton-openai-gateway").exists()


# Run in the image venv: open the store a URL names, as the gateway does from its settings, and
# keep and read back one response.
STORE_PROBE = """
import asyncio, sys, time
import psycopg
from gateway.config import Settings
from gateway.store import open_store
from gateway.store.base import StoredResponse

async def main(url):
    store = open_store(Settings(responses_store=url))
    await store.start()
    try:
        stored = StoredResponse("resp_image", "", time.time(), {"id": "resp_image"}, [], None)
        await store.put(stored)
        assert (await store.get("resp_image", "")).response == {"id": "resp_image"}
    finally:
        await store.close()
    print(type(store).__name__, psycopg.pq.__impl__)

asyncio.run(main(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = start_postgres()
    try:
        yield server
    finally:
        stop_postgres(server)


def test_image_venv_opens_the_responses_store_on_sqlite_and_postgresql(
    image_venv: Path, postgres: PostgresServer
) -> None:
    sqlite = _venv_python(image_venv, STORE_PROBE, f"sqlite:///{image_venv.parent / 'state' / 'responses.db'}")
    assert sqlite.returncode == 0, sqlite.stderr
    assert sqlite.stdout.split()[0] == "SqliteResponseStore"
    pg = _venv_python(image_venv, STORE_PROBE, postgres.url())
    assert pg.returncode == 0, pg.stderr
    # psycopg's own libpq: the slim image has no system libpq for the pure-Python implementation
    assert pg.stdout.split() == ["PostgresResponseStore", "binary"]


@pytest.fixture(scope="module")
def triton() -> Iterator[TritonServer]:
    assert (REFERENCE_MODELS / MODEL / "config.pbtxt").exists(), "the reference model is missing"
    server = TritonServer(REFERENCE_MODELS).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gateway_url(image_venv: Path, triton: TritonServer) -> Iterator[tuple[str, int]]:
    port = free_port()
    log = image_venv.parent / "gateway.log"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(image_venv.parent)}
    with open(log, "wb") as handle:
        process = subprocess.Popen(  # noqa: S603 - our own console script
            [
                str(image_venv / "bin" / "triton-openai-gateway"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--triton-url",
                triton.grpc_url,
                "--model-repository",
                str(REFERENCE_MODELS),
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=image_venv.parent,
        )
    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline:
            assert process.poll() is None, f"gateway exited:\n{log.read_text()[-4000:]}"
            try:
                status, _ = _request("127.0.0.1", port, "GET", "/health/ready")
            except OSError:
                status = None
            if status == 200:
                break
            time.sleep(0.3)
        assert status == 200, f"gateway never became ready:\n{log.read_text()[-4000:]}"
        yield ("127.0.0.1", port)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _request(host: str, port: int, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {} if body is None else {"Content-Type": "application/json"}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_installed_gateway_serves_a_chat_completion_from_real_triton(gateway_url: tuple[str, int]) -> None:
    host, port = gateway_url
    status, body = _request(host, port, "GET", "/health")
    assert status == 200
    status, body = _request(
        host,
        port,
        "POST",
        "/v1/chat/completions",
        {
            "model": MODEL,
            "max_tokens": 8,
            "temperature": 0,
            "messages": [{"role": "user", "content": "Hello"}],
        },
    )
    assert status == 200, body
    completion = json.loads(body)
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"]["role"] == "assistant"
    assert completion["choices"][0]["finish_reason"] in ("stop", "length")
    assert 0 < completion["usage"]["completion_tokens"] <= 8


def test_installed_gateway_streams_sse_to_done(gateway_url: tuple[str, int]) -> None:
    host, port = gateway_url
    status, body = _request(
        host,
        port,
        "POST",
        "/v1/chat/completions",
        {
            "model": MODEL,
            "max_tokens": 8,
            "stream": True,
            "messages": [{"role": "user", "content": "Hello"}],
        },
    )
    assert status == 200, body
    events = [line[len(b"data: ") :] for line in body.splitlines() if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    assert json.loads(events[0])["object"] == "chat.completion.chunk"
