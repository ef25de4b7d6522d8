"""A private Prometheus (Debian's ``prometheus`` package) for the tests: its own port, its own
TSDB directory, a config the test writes, and the HTTP API to query what it scraped.

The system service the package installs is never used (it is not started in a container, and a
test must not depend on or disturb it).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from gateway.triton_launcher import free_port


class PrometheusServerError(RuntimeError):
    """prometheus is missing, or did not start as asked."""


@dataclass
class PrometheusServer:
    directory: Path
    config: dict[str, Any]
    """``prometheus.yml`` as a mapping; ``rule_files`` relative to ``directory``."""
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = shutil.which("prometheus") or "/usr/bin/prometheus"
        if not Path(binary).exists():
            raise PrometheusServerError("prometheus is not installed (scripts/test.sh installs Debian's prometheus)")
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config, sort_keys=False))
        log = open(self.directory / "prometheus.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ],
            cwd=self.directory,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if httpx.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise PrometheusServerError(f"prometheus did not start:\n{self.log_text()}")

    def log_text(self) -> str:
        return (self.directory / "prometheus.log").read_text(errors="replace")

    def api(self, path: str, **params: Any) -> Any:
        """``/api/v1/<path>``'s ``data``; an error answer (a bad query) raises with Prometheus' words."""
        answer = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
        body = answer.json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector (a scalar answer as one sample without labels)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
