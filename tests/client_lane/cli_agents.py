"""Claude Code and the Codex CLI, run as their users run them (non-interactively) against the
gateway: the harness of tests/client_lane/test_cli_agents.py.

Both are native binaries from the lane's npm package (``node/node_modules/.bin``), so there is no
fetch to wrap: each CLI's base URL is a ``RecordingProxy``, a pass-through HTTP proxy in front of
the gateway that keeps every request the CLI sent, the status it got and the gateway's request id.
The gateway's log (``--log-requests``: one JSON line per generation with its final status, also
for a stream that failed after its 200) is read by those ids. Each CLI has its own HOME (and
CODEX_HOME) in a temporary directory: nothing of the user's configuration is read, and its
sessions stay there for the next turn's ``--resume`` / ``exec resume``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

NODE_BIN = Path(__file__).resolve().parent / "node" / "node_modules" / ".bin"
CLAUDE, CODEX = NODE_BIN / "claude", NODE_BIN / "codex"
RUN_TIMEOUT = 180.0
"""Seconds one CLI run may take. A run on the scripted model takes about a second; on tiny-llm,
its prefill of the CLI's prompt (~24,000 and ~30,000 tokens) takes 4 to 8 s, and its answer, of
random length, ~10 ms a token."""
API_KEY = "sk-client-lane"
"""What each CLI sends as its key (the lane's gateway has no keys: any is accepted)."""

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host"}
)
LONG_FIELDS = frozenset({"messages", "system", "tools", "input", "instructions", "metadata", "client_metadata"})
KEEP_CHARS = 1 << 20
"""Of each answer, what the proxy keeps for the assertions (an SSE stream as its text)."""


def hermes_call(name: str, arguments: dict[str, Any]) -> str:
    """A tool call as a hermes-style model writes it (the tool-call parser ``/v1/models`` names for
    the scripted model, detected from tiny-llm's chat template)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _responses(pieces: list[str]) -> list[dict[str, Any]]:
    return [{"text": [base64.b64encode(piece.encode()).decode()]} for piece in pieces]


def agent_script(first: list[str], seen: str, then: list[str]) -> str:
    """A user prompt the scripted model answers in two steps (tests/triton_models/README.md,
    ``after``): ``first`` (a tool call), then, once the conversation after the script holds
    ``seen`` (the tool's output), ``then``. Each string is one response (one token)."""
    script = {"responses": _responses(first), "after": [{"seen": seen, "responses": _responses(then)}]}
    return "<script>" + json.dumps(script) + "</script>"


def answer_script(pieces: list[str]) -> str:
    """A user prompt the scripted model answers with ``pieces``, one response each."""
    return "<script>" + json.dumps({"responses": _responses(pieces)}) + "</script>"


@dataclass
class Exchange:
    """One request a CLI sent, as the proxy passed it on."""

    method: str
    path: str
    body: Any
    status: int | None = None
    request_id: str | None = None
    answer: str = ""

    def brief(self) -> str:
        """The request's small fields (all but the conversation, instructions and tools) and the
        start of its answer: what a refusal is about."""
        small = self.body
        if isinstance(self.body, dict):
            small = {k: v for k, v in self.body.items() if k not in LONG_FIELDS}
        return f"{self.method} {self.path} {json.dumps(small)[:600]} -> {self.status}: {self.answer[:400]!r}"


@dataclass
class RecordingProxy:
    """A pass-through proxy to ``upstream`` on a free local port, recording every exchange.
    Answers are passed on chunk by chunk (a CLI reads its SSE events as they come)."""

    upstream: str
    exchanges: list[Exchange] = field(default_factory=list)

    def __post_init__(self) -> None:
        exchanges = self.exchanges
        client = httpx.Client(base_url=self.upstream, timeout=httpx.Timeout(RUN_TIMEOUT, connect=10))
        self._client = client

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
                return None

            def _read_body(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() != "chunked":
                    return self.rfile.read(int(self.headers.get("content-length") or 0))
                parts = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()
                return b"".join(parts)

            def _forward(self) -> None:
                content = self._read_body()
                try:
                    body = json.loads(content) if content else None
                except ValueError:
                    body = {"undecoded": content[:2000].decode("latin-1")}
                exchange = Exchange(self.command, self.path, body)
                exchanges.append(exchange)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                try:
                    with client.stream(self.command, self.path, headers=headers, content=content) as answer:
                        exchange.status = answer.status_code
                        exchange.request_id = answer.headers.get("x-request-id")
                        self.send_response(answer.status_code)
                        for name, value in answer.headers.multi_items():
                            if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                                self.send_header(name, value)
                        self.send_header("transfer-encoding", "chunked")
                        self.end_headers()
                        kept: list[str] = []
                        size = 0
                        for chunk in answer.iter_raw():
                            if size < KEEP_CHARS:
                                kept.append(chunk.decode("utf-8", errors="replace"))
                                size += len(chunk)
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            self.wfile.flush()
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                        exchange.answer = "".join(kept)
                except (httpx.HTTPError, OSError) as exc:
                    exchange.answer = f"proxy: {type(exc).__name__}: {exc}"
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()


def gateway_statuses(log_path: Path | None, request_ids: list[str], wait: float = 5.0) -> dict[str, int]:
    """The final status the gateway's log (``--log-requests`` lines) gives each of ``request_ids``
    it logged: generations (a request refused before it was planned has no line). Waits up to
    ``wait`` seconds for the lines of requests still finishing."""
    if log_path is None:
        return {}
    wanted = set(request_ids)
    deadline = time.monotonic() + wait
    while True:
        found: dict[str, int] = {}
        for line in log_path.read_text(errors="replace").splitlines():
            if " gateway.access " in line and "{" in line:
                record = json.loads(line[line.index("{") :])
                if record.get("request_id") in wanted:
                    found[record["request_id"]] = int(record["status"])
        if len(found) == len(wanted) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@dataclass
class Run:
    """One CLI run: its exit code, its output, and what it sent."""

    command: list[str]
    returncode: int
    stdout: str
    stderr: str
    exchanges: list[Exchange]
    seconds: float

    def json(self) -> Any:
        """The one JSON document the run printed (``claude --output-format json``)."""
        return json.loads(self.stdout)

    def events(self) -> list[dict[str, Any]]:
        """The JSON lines the run printed (``stream-json``, ``codex exec --json``)."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]

    def bodies(self, path: str) -> list[Any]:
        """The bodies of the requests sent to ``path`` (the query string aside)."""
        return [e.body for e in self.exchanges if e.path.partition("?")[0] == path]

    def describe(self) -> str:
        sent = "\n".join(exchange.brief() for exchange in self.exchanges) or "(none)"
        shown = [part if len(part) < 200 else part[:200] + "..." for part in self.command]
        return (
            f"{' '.join(shown)}\nexited {self.returncode} in {self.seconds:.1f} s\n"
            f"stdout (end): {self.stdout[-4000:]}\nstderr (end): {self.stderr[-2000:]}\nrequests:\n{sent}"
        )


def base_env(home: Path) -> dict[str, str]:
    """A clean environment: PATH, locale and CA settings only; HOME and the XDG folders in the
    run's own directory."""
    kept = ("PATH", "LANG", "LC_ALL", "TERM", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS")
    env = {name: os.environ[name] for name in kept if name in os.environ}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        NO_COLOR="1",
    )
    return env


def missing(binary: Path) -> str | None:
    """Why ``binary`` cannot run here (None: it can)."""
    if not binary.exists():
        return f"{binary} is not installed: `bash scripts/client-lane.sh` installs it (npm ci in {binary.parents[2]})"
    if shutil.which("node") is None:
        return "node is not on PATH"
    return None


@dataclass
class Cli:
    """One CLI user: a home of its own, a working directory, the proxy as its gateway."""

    root: Path
    proxy: RecordingProxy
    model: str
    thinking: bool

    def __post_init__(self) -> None:
        self.home = self.root / "home"
        self.work = self.root / "work"
        self.home.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(exist_ok=True)

    def env(self) -> dict[str, str]:
        return base_env(self.home)

    def run(self, command: list[str]) -> Run:
        """Run to its end (``RUN_TIMEOUT``), stdin closed, recording what it sent."""
        first = len(self.proxy.exchanges)
        started = time.monotonic()
        done = subprocess.run(
            command,
            cwd=self.work,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
        seconds = time.monotonic() - started
        return Run(command, done.returncode, done.stdout, done.stderr, self.proxy.exchanges[first:], seconds)


class ClaudeCode(Cli):
    """Claude Code on the gateway's Messages API, configured by environment as its docs say for a
    gateway (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``, ``ANTHROPIC_MODEL``, and the small
    fast model the same one); thinking off through the user's ``settings.json``
    (``alwaysThinkingEnabled: false``). Its Bash tool may run ``echo`` without asking."""

    ALLOWED_TOOLS = "Bash(echo:*)"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.thinking:
            settings = self.home / ".claude" / "settings.json"
            settings.parent.mkdir(parents=True, exist_ok=True)
            settings.write_text(json.dumps({"alwaysThinkingEnabled": False}))

    def env(self) -> dict[str, str]:
        return {
            **super().env(),
            "ANTHROPIC_BASE_URL": self.proxy.url,
            "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_MODEL": self.model,
            "ANTHROPIC_SMALL_FAST_MODEL": self.model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": self.model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }

    def ask(self, prompt: str, *, stream: bool = False, resume: str | None = None) -> Run:
        """``claude -p <prompt>``: one JSON result, or (``stream``) the JSON lines of every event."""
        command = [str(CLAUDE), "-p", prompt, "--allowedTools", self.ALLOWED_TOOLS]
        command += ["--output-format", "stream-json", "--verbose"] if stream else ["--output-format", "json"]
        if resume is not None:
            command += ["--resume", resume]
        return self.run(command)


class Codex(Cli):
    """The Codex CLI on the gateway's Responses API, configured in ``$CODEX_HOME/config.toml`` as
    a model provider (its key in the environment variable the provider names). Reasoning on:
    effort ``medium`` with summaries ``auto``; off: effort ``none``. Commands run unsandboxed
    (``danger-full-access``, approval ``never``): the lane checks the gateway, and Codex's sandbox
    depends on what the kernel offers."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.codex_home = self.home / ".codex"
        self.codex_home.mkdir(exist_ok=True)
        effort = "medium" if self.thinking else "none"
        (self.codex_home / "config.toml").write_text(
            f'model = "{self.model}"\n'
            'model_provider = "gateway"\n'
            f'model_reasoning_effort = "{effort}"\n'
            'model_reasoning_summary = "auto"\n'
            # tiny-llm's context (Codex's fallback for a model it does not know is 272,000).
            "model_context_window = 131072\n"
            'approval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n'
            "\n"
            "[model_providers.gateway]\n"
            'name = "triton-openai-gateway"\n'
            f'base_url = "{self.proxy.url}/v1"\n'
            'wire_api = "responses"\n'
            'env_key = "GATEWAY_API_KEY"\n'
        )

    def env(self) -> dict[str, str]:
        return {**super().env(), "CODEX_HOME": str(self.codex_home), "GATEWAY_API_KEY": API_KEY}

    def ask(self, prompt: str, *, resume: str | None = None) -> Run:
        """``codex exec --json <prompt>`` (``exec resume <thread> <prompt>`` for a later turn)."""
        command = [str(CODEX), "exec"]
        if resume is not None:
            command.append("resume")
        command += ["--skip-git-repo-check", "--json"]
        command += [resume, prompt] if resume is not None else [prompt]
        return self.run(command)
