"""Start and stop what a benchmark measures: one tritonserver and one gateway per variant.

A *variant* is a tree's ``gateway`` package with some environment: ``before=/tmp/before``,
``aio=/work/main:GATEWAY_TRITON_TRANSPORT=aio``. Every variant runs in this venv, so only the
gateway's own code and settings differ. The venv holds an editable install of this repository,
but an editable install is a finder placed *after* ``sys.path``: a gateway started with the
tree as its working directory and on ``PYTHONPATH`` imports that tree's package. The launcher
prints the ``gateway.__file__`` it imported, and ``start_gateway`` refuses a process that did not
import its own tree's.

Whatever ends a run (an error, Ctrl-C, SIGTERM), ``Stack`` stops every gateway and then Triton;
both also die with this process if it is killed outright (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
REFERENCE_REPOSITORY = ROOT / "triton_models" / "reference"
TEST_REPOSITORY = ROOT / "tests" / "triton_models"

LAUNCH = (
    "import runpy, sys, gateway; print('bench: gateway from', gateway.__file__, flush=True); "
    "sys.argv[0] = 'gateway'; runpy.run_module('gateway', run_name='__main__', alter_sys=True)"
)
"""``python -m gateway`` that first says which package it imported."""


def log(message: str) -> None:
    """Progress on stderr: the report is what goes to stdout."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def exit_on_signals() -> None:
    """SIGTERM and SIGHUP unwind like Ctrl-C, so every ``finally`` stops its processes."""

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM it when the bench process dies, however it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass(frozen=True)
class Variant:
    """A gateway to measure: a tree whose ``gateway`` package runs, and extra environment."""

    name: str
    root: Path
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> Variant:
        """``NAME=TREE_PATH[:ENV=VAL[,ENV=VAL...]]``."""
        name, sep, rest = text.partition("=")
        tree, _, assignments = rest.partition(":")
        if not sep or not name or not tree:
            raise ValueError(f"--variant wants NAME=TREE_PATH[:ENV=VAL,...], got {text!r}")
        root = Path(tree).expanduser().resolve()
        if not (root / "gateway" / "__init__.py").is_file():
            raise ValueError(f"variant {name}: {root} holds no gateway package")
        env = []
        for item in filter(None, assignments.split(",")):
            key, eq, value = item.partition("=")
            if not eq or not key:
                raise ValueError(f"variant {name}: {item!r} is not ENV=VAL")
            env.append((key, value))
        return cls(name, root, tuple(env))

    def describe(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.env)
        return f"{self.name}={self.root}" + (f":{extra}" if extra else "")


THIS = Variant("this", ROOT)


@dataclass
class Gateway:
    """A running gateway process."""

    variant: Variant
    process: subprocess.Popen[bytes]
    port: int
    log_file: Path
    package: str = ""
    """The ``gateway/__init__.py`` the process imported."""

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def free_port() -> int:
    from gateway.triton_launcher import free_port as pick

    return pick()


def start_triton(log_file: Path) -> Any:
    """tritonserver with the reference and the test models (the launcher the tests use)."""
    from gateway.triton_launcher import TritonServer

    server = TritonServer(
        REFERENCE_REPOSITORY, log_file=log_file, extra_args=(f"--model-repository={TEST_REPOSITORY}",)
    )
    server.start()
    return server


def triton_pid(triton: Any) -> int | None:
    process = getattr(triton, "_process", None)
    return None if process is None else int(process.pid)


def triton_failed(triton: Any) -> bool:
    """Whether tritonserver died, or is dying: after ``double free`` or gRPC's ``prior > 0``
    assertion (a cancellation race in Triton 2.51's frontend, fixed in 24.12) it can sit in its
    signal handler for seconds with its sockets open, answering nothing; only its log tells."""
    return not triton.running or "Signal (6) received" in triton.log_tail(80)


def start_gateway(
    variant: Variant, triton_url: str, log_file: Path, extra_args: tuple[str, ...] = (), ready_within: float = 60.0
) -> Gateway:
    """The variant's gateway on a free port, ready to serve, checked to run the variant's tree."""
    port = free_port()
    command = [
        sys.executable,
        "-c",
        LAUNCH,
        f"--triton-url={triton_url}",
        f"--port={port}",
        f"--model-repository={REFERENCE_REPOSITORY},{TEST_REPOSITORY}",
        "--log-level=warning",
        *extra_args,
    ]
    env = {**os.environ, "PYTHONPATH": str(variant.root), **dict(variant.env)}
    with open(log_file, "ab") as handle:
        process = subprocess.Popen(  # noqa: S603 - our interpreter, our arguments
            command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=variant.root,
            env=env,
            start_new_session=True,  # Ctrl-C reaches the bench, which stops it in order
            preexec_fn=_die_with_parent,  # noqa: PLW1509
        )
    gateway = Gateway(variant, process, port, log_file)
    deadline = time.monotonic() + ready_within
    try:
        while not _answers(gateway.url + "/health/ready"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gateway {variant.name} did not start:\n{_tail(log_file)}")
            time.sleep(0.2)
        gateway.package = _imported_package(log_file)
        if not Path(gateway.package).is_relative_to(variant.root):
            raise RuntimeError(f"gateway {variant.name} imported {gateway.package!r}, not {variant.root}'s")
    except BaseException:
        gateway.stop()
        raise
    return gateway


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310 - loopback
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _imported_package(log_file: Path) -> str:
    for line in log_file.read_text(errors="replace").splitlines():
        if line.startswith("bench: gateway from "):
            return line.removeprefix("bench: gateway from ").strip()
    return ""


def _tail(path: Path, size: int = 3000) -> str:
    return path.read_text(errors="replace")[-size:] if path.exists() else ""


@dataclass
class Stack:
    """One tritonserver and one gateway per variant; a context manager that stops them all."""

    variants: list[Variant]
    workdir: Path
    gateway_args: tuple[str, ...] = ()
    triton: Any = None
    gateways: dict[str, Gateway] = field(default_factory=dict)
    starts: int = 0

    def __enter__(self) -> Stack:
        self.starts += 1
        try:
            log("starting tritonserver")
            self.triton = start_triton(self.workdir / f"tritonserver-{self.starts}.log")
            for variant in self.variants:
                log_file = self.workdir / f"gateway-{variant.name}-{self.starts}.log"
                gateway = start_gateway(variant, self.triton.grpc_url, log_file, self.gateway_args)
                self.gateways[variant.name] = gateway
                log(f"gateway {variant.describe()} pid {gateway.pid} on {gateway.url}, running {gateway.package}")
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self) -> None:
        """A fresh Triton and fresh gateways, after Triton died."""
        self.stop()
        self.__enter__()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> bool:
        """Stop everything; whether Triton had died on its own."""
        died = False
        for gateway in self.gateways.values():
            gateway.stop()
        self.gateways.clear()
        if self.triton is not None:
            died = triton_failed(self.triton)
            self.triton.stop()
            self.triton = None
        return died


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        "unknown",
    )
    packages: dict[str, str | None] = {}
    for name in ("grpcio", "tritonclient", "nvidia-pytriton", "uvicorn", "uvloop", "httptools", "fastapi", "pydantic"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": f"{platform.python_version()} ({sys.executable})",
        "loadavg_at_start": os.getloadavg(),
        "packages": packages,
    }


def git_head(root: Path) -> str:
    """The tree's commit, with ``+dirty`` when it has uncommitted changes (what ran is not that commit)."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "gateway"], capture_output=True)
    except OSError:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if head.returncode == 0 else "unknown"
