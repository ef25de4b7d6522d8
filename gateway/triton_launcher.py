"""Run a real ``tritonserver`` from the ``nvidia-pytriton`` wheel.

The wheel ships a complete Triton 2.51 (binary, python backend, one backend stub per Python
version), but not laid out the way ``tritonserver`` expects to find a backend directory, and its
shared libraries live under hashed names in ``nvidia_pytriton.libs``. This module hides that: it
finds the pieces, assembles a writable backend directory with the stub of the running Python,
starts the server on free ports, waits for readiness and stops it (SIGTERM, then SIGKILL after a
bound). It is used by the CLI's embedded mode and by the test fixtures, so both run the same Triton.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

logger = logging.getLogger(__name__)

DEFAULT_MODEL_REPOSITORY = Path(__file__).resolve().parent.parent / "triton_models" / "reference"


class TritonLaunchError(RuntimeError):
    """tritonserver could not be found, started, or did not become ready."""


@dataclass(frozen=True)
class TritonInstallation:
    """Where the pieces of the wheel's Triton are."""

    binary: Path
    python_backend: Path
    stub: Path
    libs: Path
    site_packages: Path

    @classmethod
    def find(cls) -> TritonInstallation:
        try:
            import pytriton  # type: ignore[import-untyped]
        except ImportError as exc:
            raise TritonLaunchError(
                "embedded Triton needs the 'local' extra: pip install 'triton-openai-gateway[local]'"
            ) from exc
        root = Path(pytriton.__file__).resolve().parent / "tritonserver"
        site_packages = Path(pytriton.__file__).resolve().parent.parent
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        found = cls(
            binary=root / "bin" / "tritonserver",
            python_backend=root / "backends" / "python",
            stub=root / "python_backend_stubs" / version / "triton_python_backend_stub",
            libs=site_packages / "nvidia_pytriton.libs",
            site_packages=site_packages,
        )
        for path in (found.binary, found.python_backend, found.stub, found.libs):
            if not path.exists():
                raise TritonLaunchError(f"nvidia-pytriton is incomplete: {path} is missing")
        return found


def _libpython_dirs() -> list[str]:
    """The running interpreter's shared libpython, if it has one.

    The stub links ``libpython3.X.so.1.0`` by name; without this the loader may pick the
    distribution's copy (another patch release) while the stdlib comes from the running
    interpreter, and C extensions such as ``_ssl`` then fail with undefined symbols.
    """
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and sysconfig.get_config_var("Py_ENABLE_SHARED") and Path(libdir).is_dir():
        return [str(libdir)]
    return []


def free_port() -> int:
    """A port the kernel just handed out; good enough for tests and a local default."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class TritonServer:
    """One tritonserver process. Use as a context manager or call ``start``/``stop``."""

    model_repository: Path
    log_file: Path | None = None
    grpc_port: int = 0
    http_port: int = 0
    metrics_port: int = 0
    ready_timeout: float = 120.0
    extra_args: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _workdir: Path | None = field(default=None, init=False, repr=False)
    _log_handle: object | None = field(default=None, init=False, repr=False)

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> TritonServer:
        install = TritonInstallation.find()
        self._workdir = Path(tempfile.mkdtemp(prefix="triton-gw-"))
        backends = self._workdir / "backends"
        shutil.copytree(install.python_backend, backends / "python", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(install.stub, backends / "python" / "triton_python_backend_stub")
        self.grpc_port = self.grpc_port or free_port()
        self.http_port = self.http_port or free_port()
        self.metrics_port = self.metrics_port or free_port()
        if self.log_file is None:
            self.log_file = self._workdir / "tritonserver.log"
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        command = [
            str(install.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backends}",
            f"--grpc-port={self.grpc_port}",
            f"--http-port={self.http_port}",
            f"--metrics-port={self.metrics_port}",
            "--disable-auto-complete-config",
            "--exit-timeout-secs=5",
            "--log-verbose=0",
            *self.extra_args,
        ]
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (*_libpython_dirs(), str(install.libs), env.get("LD_LIBRARY_PATH", "")) if p
        )
        env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(install.site_packages), env.get("PYTHONPATH", "")) if p
        )
        env.update(self.extra_env)
        handle = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
        self._log_handle = handle
        logger.info("starting tritonserver (grpc %s, log %s)", self.grpc_port, self.log_file)
        self._process = subprocess.Popen(  # noqa: S603 - fixed binary, our arguments
            command, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        url = f"http://127.0.0.1:{self.http_port}/v2/health/ready"
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                raise TritonLaunchError(
                    f"tritonserver exited during startup; last log lines:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - loopback
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise TritonLaunchError(f"tritonserver not ready after {self.ready_timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        if self.log_file is None or not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL, no grace: for failure tests that need Triton to vanish mid-request."""
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()

    def stop(self, grace: float = 15.0) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                logger.warning("tritonserver ignored SIGTERM for %.0fs; killing it", grace)
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            except ProcessLookupError:
                pass
        if self._log_handle is not None:
            self._log_handle.close()  # type: ignore[attr-defined]
            self._log_handle = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir / "backends", ignore_errors=True)

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
