"""Static checks of the Dockerfile and .dockerignore (no Docker engine runs here; the install
itself is exercised by test_image_install.py)."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()
INSTRUCTIONS = [
    (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
    for line in (raw.strip() for raw in DOCKERFILE.replace("\\\n", " ").splitlines())
    if line and not line.startswith("#")
]


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction in INSTRUCTIONS:
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def test_dockerfile_is_multi_stage_on_a_slim_python_base() -> None:
    stages = _stages()
    assert len(stages) >= 2
    base = re.search(r"ARG PYTHON_IMAGE=(\S+)", DOCKERFILE)
    assert base and "slim" in base.group(1) and base.group(1).startswith("python:3.11")
    assert all(stage[0][1].startswith("${PYTHON_IMAGE}") for stage in stages)


def test_runtime_stage_is_non_root_with_healthcheck_and_cli_entrypoint() -> None:
    runtime = dict(_stages()[-1])
    user = runtime["USER"].split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert "/health" in runtime["HEALTHCHECK"] and "GATEWAY_PORT" in runtime["HEALTHCHECK"]
    assert json.loads(runtime["ENTRYPOINT"]) == ["triton-openai-gateway"]
    assert "GATEWAY_HOST=0.0.0.0" in runtime["ENV"]
    port = re.search(r"GATEWAY_PORT=(\d+)", runtime["ENV"])
    assert port and runtime["EXPOSE"] == port.group(1)
    assert "COPY" in runtime and "--from=build /opt/venv /opt/venv" in runtime["COPY"]
    assert not any(i == "RUN" and "pip" in a for i, a in _stages()[-1]), "no installs in the runtime stage"


def test_runtime_stage_points_the_store_at_a_volume_its_user_owns() -> None:
    """The user has no home and the chart mounts the root filesystem read-only: the SQLite file
    must default to a declared volume the gateway's user can write."""
    from gateway.store.location import SqliteLocation, parse_store_url

    runtime = _stages()[-1]
    uid, _, gid = dict(runtime)["USER"].partition(":")
    store = re.search(r"\bGATEWAY_RESPONSES_STORE=(\S+)", dict(runtime)["ENV"])
    assert store, "the image must set GATEWAY_RESPONSES_STORE (the default under ~ is unusable there)"
    location = parse_store_url(store.group(1))
    assert isinstance(location, SqliteLocation) and location.path.is_absolute()
    state_dir = str(location.path.parent)
    volumes = [json.loads(a) for i, a in runtime if i == "VOLUME"]
    assert volumes == [[state_dir]]
    made = [a for i, a in runtime if i == "RUN" and state_dir in a]
    assert len(made) == 1 and re.search(rf"install -d -o {uid} -g {gid} -m 0700 {re.escape(state_dir)}\b", made[0])
    volume_at = next(n for n, (i, _) in enumerate(runtime) if i == "VOLUME")
    made_at = next(n for n, (i, a) in enumerate(runtime) if i == "RUN" and state_dir in a)
    assert made_at < volume_at, "changes after VOLUME are discarded: make the directory first"


def test_install_script_installs_the_postgres_redis_and_tracing_extras_too() -> None:
    """One image serves SQLite and PostgreSQL stores, key limits alone or in Redis, and traces
    when an endpoint is set: the postgres, redis and tracing extras are part of the install."""
    script = (REPO_ROOT / "deploy" / "docker" / "install-gateway.sh").read_text()
    extras = re.search(r'pip install [^\n]*"\$1\[([a-z,]+)\]"', script)
    assert extras and set(extras.group(1).split(",")) == {"speed", "postgres", "redis", "tracing"}


def test_build_stage_installs_through_the_tested_script() -> None:
    """The build stage runs nothing but the tested script: no compiler, no system packages."""
    build = _stages()[0]
    runs = [a for i, a in build if i == "RUN"]
    assert runs == ["install-gateway /src /opt/venv /tmp/wheels"]
    assert ("COPY", "deploy/docker/install-gateway.sh /usr/local/bin/install-gateway") in build


def _ignored(path: str, patterns: list[str]) -> bool:
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/") or fnmatch.fnmatch(path, pattern + "/*"):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_only_what_the_build_copies() -> None:
    patterns = [
        p.strip() for p in (REPO_ROOT / ".dockerignore").read_text().splitlines() if p.strip() and not p.startswith("#")
    ]
    for needed in (
        "pyproject.toml",
        "gateway/config.py",
        "gateway/http/routes/health.py",
        "deploy/docker/install-gateway.sh",
    ):
        assert not _ignored(needed, patterns), needed
    for heavy in (
        ".venv/bin/python",
        ".git/HEAD",
        "triton_models/weights/tiny-llm/model.safetensors",
        "tests/deploy/test_chart.py",
        "deploy/helm/triton-openai-gateway/values.yaml",
        "scripts/test.sh",
        "gateway/__pycache__/app.cpython-311.pyc",
    ):
        assert _ignored(heavy, patterns), heavy
