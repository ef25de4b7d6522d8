"""A real Redis server (Debian's ``redis-server`` package) on a free loopback port, for tests.

No persistence (``--save ""``, no append-only file) and its files in a private directory, so it
never meets a system Redis. ``scripts/test.sh`` installs the package; a missing server fails the
fixture with that hint, never a skip.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from gateway.triton_launcher import free_port


class RedisServerError(RuntimeError):
    """redis-server is missing, or did not start as asked."""


@dataclass
class RedisServer:
    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(binary).exists():
            raise RedisServerError("redis-server is not installed (scripts/test.sh installs Debian's redis-server)")
        self.directory.mkdir(parents=True, exist_ok=True)
        log = open(self.directory / "redis.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.directory,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RedisServerError(f"redis-server did not start:\n{(self.directory / 'redis.log').read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
