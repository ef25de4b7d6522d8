"""A real nginx (Debian's ``nginx-light`` 1.22) as a gRPC proxy in front of Triton, for drain tests.

Started with its own prefix, config, pid file, error log and temp paths in a private directory,
``daemon off`` so the master stays our child, in a new session so that every worker (including
the old ones still draining after a reload) shares the master's process group and can be killed
by that id if the master itself is gone. Reload and quit go through ``nginx -s`` exactly as an
operator types them.

What nginx 1.22.1 sends on an HTTP/2 connection from a client, seen with a raw frame-level client
(h2 to encode our side, hyperframe to decode nginx's; four ModelStreamInfer streams of 40 messages
through ``grpc_pass``, one signal after their fifth message):

* ``nginx -s reload``: about 0.1 s later (the new workers are up) the old worker sends ONE
  ``GOAWAY(last_stream_id=<the highest stream id it received>, NO_ERROR)``; no
  ``GOAWAY(2**31-1)`` first and no PING. Every stream up to that id keeps flowing to its end
  (DATA, then the trailers with END_STREAM); right after the last one ends nginx closes the TCP
  connection. A new stream opened on that connection after the GOAWAY gets no answer at all
  (no RST_STREAM, no HEADERS) until that close: nginx ignores it, as RFC 9113 allows, so a
  client must not open one there. New connections go to the new workers.
* ``nginx -s reload`` with an idle connection: ``GOAWAY(last_stream_id=<last id>)`` and an
  immediate TCP close.
* ``nginx -s quit``: the same GOAWAY at once (about 5 ms), the same drain to the end of every
  stream, TCP close, then the master exits with 0 and nothing listens on the port any more.

A client that handles GOAWAY as RFC 9113 says (stop opening streams there, let the ones at or
below ``last_stream_id`` finish) loses nothing: grpc.aio does. One that takes any GOAWAY for
"connection closed" fails on the next frame: h2 4.x moves its connection state machine to CLOSED
on any GOAWAY (python-hyper/h2 issue 1181), so a plain h2 client gets ``Invalid input
ConnectionInputs.RECV_DATA in state ConnectionState.CLOSED``; the gateway, which parses DATA
frames itself, gets ``RECV_HEADERS`` at the first stream's trailers.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

CONFIG = """\
daemon off;
master_process on;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
{user}
events {{
    worker_connections 1024;
}}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    # streams of a test run for seconds; none of nginx's own timeouts may cut one
    keepalive_timeout 300s;
    client_body_timeout 300s;
    send_timeout 300s;
    client_header_timeout 300s;
    http2_max_concurrent_streams 256;
    server {{
        listen 127.0.0.1:{port} http2;
        location / {{
            grpc_pass grpc://{upstream};
            grpc_connect_timeout 5s;
            grpc_read_timeout 300s;
            grpc_send_timeout 300s;
        }}
    }}
}}
"""


DRAINING = "gracefully shutting down"
"""What a worker logs (level notice) when it starts to drain, after ``-s reload`` or ``-s quit``."""


class NginxError(RuntimeError):
    """nginx is missing, or did not start, reload or stop as asked."""


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass
class Nginx:
    """One nginx master with its workers, proxying HTTP/2 (gRPC) on ``port`` to ``upstream``."""

    directory: Path
    port: int
    upstream: str
    """``host:port`` of the gRPC server behind nginx (Triton)."""
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        """What the gateway's ``--triton-url`` takes."""
        return f"127.0.0.1:{self.port}"

    @property
    def config(self) -> Path:
        return self.directory / "nginx.conf"

    @property
    def error_log(self) -> Path:
        return self.directory / "error.log"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_text(self) -> str:
        return self.error_log.read_text(errors="replace") if self.error_log.exists() else ""

    def _command(self, *args: str) -> list[str]:
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(binary).exists():
            raise NginxError("nginx is not installed (scripts/test.sh installs Debian's nginx-light)")
        return [binary, "-p", str(self.directory), "-c", str(self.config), "-e", str(self.error_log), *args]

    def start(self, timeout: float = 10.0) -> Nginx:
        if self.running:
            raise NginxError("nginx is already running")
        for temp in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.directory / temp).mkdir(parents=True, exist_ok=True)
        # as root the workers would switch to "nobody" and lose the private temp paths
        user = "user root;" if os.geteuid() == 0 else ""
        self.config.write_text(CONFIG.format(dir=self.directory, port=self.port, upstream=self.upstream, user=user))
        checked = subprocess.run(self._command("-t", "-q"), check=False, capture_output=True, text=True)
        if checked.returncode != 0:
            raise NginxError(f"nginx rejected its config:\n{checked.stderr}")
        log = open(self.directory / "stderr.log", "ab")  # noqa: SIM115 - lives as long as the process
        self._process = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise NginxError(f"nginx exited at start:\n{self.log_text()}")
            if _port_open(self.port):
                return self
            time.sleep(0.05)
        self.kill()
        raise NginxError(f"nginx did not listen on {self.port}:\n{self.log_text()}")

    def signal(self, name: str) -> None:
        """``nginx -s <name>``: reload, quit (graceful), stop (fast), reopen."""
        done = subprocess.run(self._command("-s", name), check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise NginxError(f"nginx -s {name} failed:\n{done.stderr}")

    def _drain(self, name: str, timeout: float = 5.0) -> None:
        """Signal, then wait until an old worker logs that it drains: its GOAWAY is on the wire
        then, so a test knows the drain happened while its streams were running."""
        before = self.log_text().count(DRAINING)
        self.signal(name)
        deadline = time.monotonic() + timeout
        while self.log_text().count(DRAINING) == before:
            if time.monotonic() > deadline:
                raise NginxError(f"no worker started to drain after -s {name}:\n{self.log_text()}")
            time.sleep(0.02)

    def reload(self) -> None:
        """Graceful reload: new workers take new connections, the old ones drain theirs."""
        self._drain("reload")

    def quit(self) -> None:
        """Graceful shutdown: returns once the drain began; ``wait`` for the master to be gone."""
        self._drain("quit")

    def wait(self, timeout: float) -> int:
        assert self._process is not None
        try:
            return self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise NginxError(f"nginx still running after {timeout} s:\n{self.log_text()}") from exc

    def worker_pids(self) -> list[int]:
        """Live processes of nginx's process group other than the master (workers, old ones too)."""
        if self._process is None:
            return []
        group, found = self._process.pid, []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == group:
                continue
            try:
                if os.getpgid(int(entry.name)) == group:
                    found.append(int(entry.name))
            except ProcessLookupError:
                continue
        return found

    def kill(self) -> None:
        """Fast stop, then SIGKILL to the whole process group: no worker outlives the test."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._process.wait()
