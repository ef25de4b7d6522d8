"""Run a real ``tritonserver`` from the ``nvidia-pytriton`` wheel.

The wheel ships a complete Triton 2.51 (binary, python backend, one backend stub per Python
version), but not laid out the way ``tritonserver`` expects to find a backend directory, and its
shared libraries live under hashed names in ``nvidia_pytriton.libs``. This module hides that: it
finds the pieces, assembles a writable backend directory with the stub of the running Python,
starts the server on free ports, waits for readiness and stops it (SIGTERM, then SIGKILL after a
bound). It is used by the CLI's embedded mode and by the test fixtures, so both run the same Triton.

Triton never outlives the process that started it: it gets SIGKILL from the kernel when that
process dies, however it dies (``PR_SET_PDEATHSIG``), and its python-backend stubs notice their
parent is gone and exit on their own (measured: within 0.6 s, also while a model is loading).
A start that crashes (Triton 2.51's Python backend aborts now and then while several models load)
is tried again, and what a killed Triton leaves in ``/dev/shm`` is removed (``TritonServer.start``,
``TritonServer.shm_prefix``).

The stubs run an isolated interpreter that ignores the environment's locale and starts with
``LC_CTYPE=C``, so a model that opens a UTF-8 file without ``encoding=`` (torch's inductor does)
dies with ``UnicodeDecodeError``. The stub finds its Python by looking ``python3`` up on ``PATH``
and processes that prefix's ``site-packages`` like any Python does; the launcher puts a small
virtual environment of its own first on ``PATH`` whose ``.pth`` file switches the stub to a UTF-8
locale and then adds the running interpreter's own site directories, so models see the same
packages as before, in UTF-8 as in NVIDIA's container.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import logging
import os
import shutil
import signal
import site
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

logger = logging.getLogger(__name__)

DEFAULT_MODEL_REPOSITORY = Path(__file__).resolve().parent.parent / "triton_models" / "reference"


class TritonLaunchError(RuntimeError):
    """tritonserver could not be found, started, or did not become ready."""

    def __init__(self, message: str, *, killed_by: str | None = None) -> None:
        super().__init__(message)
        self.killed_by = killed_by
        """The signal tritonserver died of while it started (an abort, a segfault), if it did not
        exit on an error it reported."""


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


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_this_thread() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when the forking thread ends.

    The kernel ties the signal to the *thread* that forked, not to the process: started from a
    worker thread, Triton would be killed when that thread ends. Outside the main thread this
    returns None (and Triton then relies on ``stop()``). libc is loaded here, before the fork, so
    the child only makes two system calls before ``exec``.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        logger.debug("tritonserver will not get a parent-death signal (not Linux, or not the main thread)")
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: nobody will signal us
            os._exit(1)

    return preexec


_STUB_STARTUP = '''"""Written by gateway.triton_launcher; runs first in every Python Triton's stubs start.

The python-backend stub initialises an isolated interpreter in the C locale (ASCII), whatever the
environment says. Switch it to UTF-8 the way a normal ``python3`` started in a UTF-8 locale would
be, then add the launching interpreter's site directories, where the models' packages are.
"""

import locale
import site
import sys

SITE_DIRS = {site_dirs!r}

if locale.getpreferredencoding(False).replace("-", "").lower() != "utf8":
    for name in ("C.UTF-8", "C.utf8", "en_US.UTF-8"):
        try:
            locale.setlocale(locale.LC_CTYPE, name)
            break
        except locale.Error:
            pass
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(encoding="utf-8", errors="backslashreplace")
for directory in SITE_DIRS:
    site.addsitedir(directory)
'''


def _site_dirs() -> list[str]:
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if Path(d).is_dir()]


def make_stub_python(directory: Path) -> Path:
    """A virtual environment over the running interpreter for the backend stubs; returns its ``bin``.

    See the module docstring for why. ``home`` is the base interpreter's directory, so the stdlib
    is the running one; ``python3`` links to the running interpreter, so the stub (which needs the
    same Python version) and any subprocess a model starts with ``sys.executable`` get it too.
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable))
    bin_dir = directory / "bin"
    packages = directory / "lib" / f"python{version}" / "site-packages"
    bin_dir.mkdir(parents=True)
    packages.mkdir(parents=True)
    for name in ("python", "python3", f"python{version}"):
        (bin_dir / name).symlink_to(sys.executable)
    (directory / "pyvenv.cfg").write_text(
        f"home = {base.parent}\ninclude-system-site-packages = false\nversion = {sys.version.split()[0]}\n"
    )
    (packages / "_gateway_stub_startup.py").write_text(_STUB_STARTUP.format(site_dirs=_site_dirs()))
    (packages / "gateway-stub-startup.pth").write_text("import _gateway_stub_startup\n")
    return bin_dir


NUMPY_PROBE = "import numpy, sys; sys.stdout.write(numpy.__version__ + ' ' + numpy.__file__)"


def check_stub_numpy(stub_bin: Path) -> None:
    """Refuse to start stubs that would run numpy 2.

    Triton 2.51's stub was built against numpy 1: under numpy 2 it hands the Python backend a
    BYTES input whose bytes are all lost (measured: a 25-byte ``text_input`` arrives as 25 copies
    of its length byte), the stub dies in ``deserialize_bytes_tensor`` and every request gets
    "Stub process ... is not healthy". Nothing on the Python side can recover the bytes, so the
    only fix is numpy < 2; saying so at launch beats that message on the first request. The probe
    runs the stubs' own interpreter, isolated as they are, so it sees the numpy they would import.
    """
    try:
        probe = subprocess.run(  # noqa: S603 - our interpreter, a fixed script
            [str(stub_bin / "python3"), "-I", "-c", NUMPY_PROBE], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.warning("could not check the backend stubs' numpy: %s", exc)
        return
    if probe.returncode != 0:
        return  # no numpy: the python backend says so itself when a model loads
    version, _, where = probe.stdout.partition(" ")
    major = version.split(".")[0]
    if major.isdigit() and int(major) >= 2:
        raise TritonLaunchError(
            f"the Python-backend stubs would run numpy {version} ({where}), and Triton 2.51's stub loses "
            "BYTES inputs with numpy 2 (every request would fail with 'Stub process ... is not healthy'). "
            f"Install numpy 1 for {sys.executable}: pip install 'numpy<2'"
        )


CRASH_SIGNALS = frozenset({"SIGABRT", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL"})
"""What a tritonserver that crashed dies of, as opposed to one killed from outside."""

SHARED_MEMORY = Path("/dev/shm")  # noqa: S108 - where shm_open puts the Python backend's regions on Linux

_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()


def free_port() -> int:
    """A port the kernel just handed out, and never one this process handed out before: servers
    started at once (several Tritons in threads) each pick three, and the kernel may give a port
    back as soon as its picker closed it; two Tritons on one metrics port means one dies after it
    said it was ready, which no retry here sees."""
    with _HANDED_OUT_LOCK:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port


def opentelemetry_trace_args(
    url: str, *, service_name: str = "triton", schedule_delay_ms: int | None = None
) -> tuple[str, ...]:
    """tritonserver's flags to trace every request with OpenTelemetry, exported as OTLP/HTTP to
    ``url`` (the full traces URL). A request that carries a ``traceparent`` (the gateway sends its
    call span's) gets Triton's spans in the caller's trace; ``level=TIMESTAMPS`` gives the request,
    queue and compute timestamps. ``schedule_delay_ms``: how long Triton's batch span processor
    waits before an export (its default is 5 s)."""
    args = [
        "--trace-config=mode=opentelemetry",
        f"--trace-config=opentelemetry,url={url}",
        f"--trace-config=opentelemetry,resource=service.name={service_name}",
        "--trace-config=rate=1",
        "--trace-config=level=TIMESTAMPS",
    ]
    if schedule_delay_ms is not None:
        args.append(f"--trace-config=opentelemetry,bsp_schedule_delay={schedule_delay_ms}")
    return tuple(args)


READY_REPORT_EVERY = 15.0
"""Seconds between the lines that say the launcher is still waiting for Triton to be ready."""


@dataclass
class TritonServer:
    """One tritonserver process. Use as a context manager or call ``start``/``stop``."""

    model_repository: Path
    log_file: Path | None = None
    grpc_port: int = 0
    http_port: int = 0
    metrics_port: int = 0
    ready_timeout: float = 600.0
    extra_args: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)
    auto_complete_config: bool = True
    """Let Triton fill in what a ``config.pbtxt`` leaves out (Triton's own default): the vLLM
    backend declares its inputs and outputs this way. False passes ``--disable-auto-complete-config``."""
    working_dir: Path | None = None
    """tritonserver's working directory (default: this process's). vLLM resolves relative paths
    in ``model.json`` against it."""
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _workdir: Path | None = field(default=None, init=False, repr=False)
    _log_handle: object | None = field(default=None, init=False, repr=False)
    shm_prefix: str = field(default_factory=lambda: f"triton_gw_{uuid.uuid4().hex[:12]}_", init=False)
    """The Python backend's shared-memory regions (``/dev/shm``, one per model instance, 1 MiB or
    more) are named with this prefix, so that a Triton that was killed (``kill``, a crash while it
    started) leaves none behind: Triton removes them only when it shuts down in order. A
    ``shm-region-prefix-name`` in ``extra_args`` wins, and its regions are left alone."""

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
        """Start and wait until ready. Ports left at 0 are picked free; if another process takes one
        of them before Triton binds it (a race no port picker avoids: vLLM's engine binds ports of
        its own while it loads beside Triton), Triton exits at once, and fresh ports are tried.
        A Triton that crashes while it starts (an abort or a segfault, not an exit on an error it
        reported) is started again as it was. Three attempts in all."""
        picked = not (self.grpc_port or self.http_port or self.metrics_port)
        for attempt in range(3):
            try:
                return self._start_once()
            except TritonLaunchError as exc:
                if attempt == 2:
                    raise
                if exc.killed_by in CRASH_SIGNALS:
                    # Triton 2.51's Python backend now and then aborts while it loads several
                    # models at once (boost::interprocess::lock_exception; Triton's tracker has it
                    # open): the same start succeeds when tried again. Not after SIGKILL (the OOM
                    # killer would kill it again) or SIGTERM (someone wants it stopped).
                    logger.warning(
                        "tritonserver crashed while it started (killed by %s; log %s); starting it again",
                        exc.killed_by,
                        self.log_file,
                    )
                    continue
                if not picked or "already in use" not in str(exc):
                    raise
                logger.warning("a port picked for tritonserver was taken before it started; trying fresh ports")
                self.grpc_port = self.http_port = self.metrics_port = 0
        raise AssertionError("unreachable")

    def _start_once(self) -> TritonServer:
        install = TritonInstallation.find()
        self._workdir = Path(tempfile.mkdtemp(prefix="triton-gw-"))
        backends = self._workdir / "backends"
        shutil.copytree(install.python_backend, backends / "python", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(install.stub, backends / "python" / "triton_python_backend_stub")
        stub_python = make_stub_python(self._workdir / "python")
        try:
            check_stub_numpy(stub_python)
        except TritonLaunchError:
            self._cleanup()
            raise
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
            *(() if self.auto_complete_config else ("--disable-auto-complete-config",)),
            "--exit-timeout-secs=5",
            "--log-verbose=0",
            *self.extra_args,
        ]
        if self._owns_shm_regions:
            command.append(f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}")
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (*_libpython_dirs(), str(install.libs), env.get("LD_LIBRARY_PATH", "")) if p
        )
        env["PATH"] = os.pathsep.join((str(stub_python), str(Path(sys.executable).parent), env.get("PATH", "")))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(install.site_packages), env.get("PYTHONPATH", "")) if p)
        env.update(self.extra_env)
        handle = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
        self._log_handle = handle
        logger.info("starting tritonserver (grpc %s, log %s)", self.grpc_port, self.log_file)
        try:
            # Own session: a Ctrl-C in the terminal reaches the gateway, which then stops Triton
            # in order, instead of reaching Triton directly.
            self._process = subprocess.Popen(  # noqa: S603 - fixed binary, our arguments
                command,
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.working_dir,
                start_new_session=True,
                preexec_fn=_die_with_this_thread(),  # noqa: PLW1509 - only prctl and getppid run there
            )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        started = time.monotonic()
        deadline, report = started + self.ready_timeout, started + READY_REPORT_EVERY
        url = f"http://127.0.0.1:{self.http_port}/v2/health/ready"
        while time.monotonic() < deadline:
            if time.monotonic() >= report:
                report += READY_REPORT_EVERY
                logger.info(
                    "waiting for tritonserver to be ready: %.0f s of at most %.0f s (log: %s)",
                    time.monotonic() - started,
                    self.ready_timeout,
                    self.log_file,
                )
            code = None if self._process is None else self._process.poll()
            if self._process is None or code is not None:
                killed_by = _signal_name(-code) if code is not None and code < 0 else None
                how = f" (killed by {killed_by})" if killed_by else "" if code is None else f" (exit code {code})"
                raise TritonLaunchError(
                    f"tritonserver exited during startup{how}; last log lines:\n{self.log_tail()}",
                    killed_by=killed_by,
                )
            try:
                with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - loopback
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError, http.client.HTTPException):  # not Triton on the port (yet)
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
            _kill_group(self._process)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds or at once if the wait is interrupted
        (a second Ctrl-C): whatever happens here, Triton and its stubs are gone afterwards."""
        process, self._process = self._process, None
        try:
            if process is not None and process.poll() is not None:
                _kill_group(process)  # Triton exited by itself (a failed start): its stubs may not have
            elif process is not None:
                logger.info("stopping tritonserver (SIGKILL after %.0f s, or at a second signal)", grace)
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                    process.wait(timeout=grace)
                    # Triton unloads its models before it exits, so a stub still in its group now
                    # is an orphan: one blocked in a model's initialize (a load cut short) does not
                    # notice its parent is gone until initialize returns.
                    _kill_group(process)
                except subprocess.TimeoutExpired:
                    logger.warning("tritonserver ignored SIGTERM for %.0fs; killing it", grace)
                    _kill_group(process)
                except ProcessLookupError:
                    pass
                except BaseException:
                    _kill_group(process)
                    raise
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        if self._log_handle is not None:
            self._log_handle.close()  # type: ignore[attr-defined]
            self._log_handle = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir / "backends", ignore_errors=True)
            shutil.rmtree(self._workdir / "python", ignore_errors=True)
        if self._owns_shm_regions:
            # Only ever called once Triton's process group is gone (or never started).
            for region in SHARED_MEMORY.glob(f"{self.shm_prefix}*"):
                region.unlink(missing_ok=True)

    @property
    def _owns_shm_regions(self) -> bool:
        return not any("shm-region-prefix-name" in arg for arg in self.extra_args)

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL Triton's process group (Triton and its stubs) and reap Triton.

    The group id cannot be reused while a stub is still in the group; once it is empty the
    kernel answers ESRCH.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
