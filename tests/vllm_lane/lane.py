"""The vLLM lane's processes: a model repository for Triton's real vLLM backend, and the three
servers of the comparison (tritonserver + gateway, vLLM's own OpenAI server).

The backend's code is NVIDIA's, kept outside the project at ``../shared/peers/triton-vllm-backend``
(beside the clone); the generated repository links to it instead of copying it. Both engines load
the project's shipped weights, so the same request must give the same tokens on both sides.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from gateway.triton_launcher import TritonServer, free_port

ROOT = Path(__file__).resolve().parents[2]
PEER = (ROOT.parent / "shared" / "peers" / "triton-vllm-backend").resolve()
WEIGHTS = ROOT / "triton_models" / "weights" / "tiny-llm"
ADAPTERS = {name: ROOT / "triton_models" / "weights" / "lora" / name for name in ("alpha", "beta")}
MODEL = "tiny-llm"
MAX_MODEL_LEN = 2048
MAX_LOGPROBS = 20
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
"""GB of KV cache per engine: vLLM's CPU default would take a large share of the shared RAM."""

# Engine arguments both sides get; vLLM's server takes them as flags, the backend from model.json.
ENGINE_ARGS: dict[str, object] = {
    "dtype": "float32",
    "enforce_eager": True,
    "max_model_len": MAX_MODEL_LEN,
    "max_logprobs": MAX_LOGPROBS,
    "enable_lora": True,
    "max_lora_rank": 8,
    "seed": 0,
}

# What NVIDIA's vLLM container repositories say, with the python backend in place of "vllm" (the
# backend's model.py sits in the version folder). No inputs, outputs or batch size: the backend's
# auto_complete_config declares them, and TritonServer lets Triton auto-complete by default.
CONFIG_PBTXT = (
    'backend: "python"\n'
    "model_transaction_policy { decoupled: true }\n"
    "instance_group [ { count: 1, kind: KIND_MODEL } ]\n"
)


def build_repository(
    where: Path,
    model: str = str(WEIGHTS),
    adapters: dict[str, Path] | None = ADAPTERS,
    thinking: Path | None = None,
) -> Path:
    """A Triton model repository serving the shipped tiny-llm through the real vLLM backend.
    ``model`` is what ``model.json`` names (a folder or a hub id); no ``adapters``: no LoRA;
    ``thinking``: also serve those weights (``thinking.build_tiny_think``) as ``tiny-think``."""
    version = where / MODEL / "1"
    version.mkdir(parents=True)
    (where / MODEL / "config.pbtxt").write_text(CONFIG_PBTXT)
    (version / "model.py").symlink_to(PEER / "model.py")
    (version / "utils").symlink_to(PEER / "utils", target_is_directory=True)
    # Absolute paths: vLLM resolves relative ones against its working directory.
    engine = {"model": model, **ENGINE_ARGS, "enable_lora": adapters is not None}
    (version / "model.json").write_text(json.dumps(engine, indent=2))
    if adapters is not None:
        (version / "multi_lora.json").write_text(json.dumps({k: str(v) for k, v in adapters.items()}, indent=2))
    if thinking is not None:
        think = where / THINK_MODEL / "1"
        think.mkdir(parents=True)
        (where / THINK_MODEL / "config.pbtxt").write_text(CONFIG_PBTXT)
        (think / "model.py").symlink_to(PEER / "model.py")
        (think / "utils").symlink_to(PEER / "utils", target_is_directory=True)
        (think / "model.json").write_text(json.dumps({"model": str(thinking), **THINK_ARGS}, indent=2))
    return where


THINK_MODEL = "tiny-think"
THINK_ARGS: dict[str, object] = {"dtype": "float32", "enforce_eager": True, "seed": 0}
"""No ``max_model_len``: each side derives it from the weights' config.json."""


def spawn_vllm_thinking(weights: Path, log: Path) -> Server:
    """vLLM's OpenAI server on the thinking model, with the reasoning parser the gateway detects
    from its template (``qwen3``), not waited for. Its template is the tokenizer folder's own."""
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(weights), "--served-model-name", THINK_MODEL, "--host", "127.0.0.1",
        "--dtype", "float32", "--enforce-eager", "--seed", "0", "--reasoning-parser", "qwen3",
    ]  # fmt: skip
    return _spawn("vllm thinking", command, log, ENGINE_ENV)


EMBED_MODEL = "tiny-llm-embed"
EMBED_ARGS: dict[str, object] = {
    "dtype": "float32",
    "enforce_eager": True,
    "max_model_len": MAX_MODEL_LEN,
    "runner": "pooling",
    "convert": "embed",
    "seed": 0,
}
"""tiny-llm's weights as vLLM runs a causal LM for embeddings: LAST pooling, normalized."""
MATRYOSHKA = [32, 64, 128]
REFERENCE_EMBED_MODEL = "reference-embed"
"""The project's own embedding model (``triton_models/reference/tiny-llm-embed``), served beside
the vLLM backend's, so the lane holds its vectors to vLLM's too."""


def build_embedding_repository(where: Path) -> Path:
    """A repository serving tiny-llm's weights as an embedding model through the real vLLM backend
    (``runner: pooling``), with matryoshka sizes given as vLLM takes them (``hf_overrides``)."""
    version = where / EMBED_MODEL / "1"
    version.mkdir(parents=True)
    (where / EMBED_MODEL / "config.pbtxt").write_text(CONFIG_PBTXT)
    (version / "model.py").symlink_to(PEER / "model.py")
    (version / "utils").symlink_to(PEER / "utils", target_is_directory=True)
    engine = {"model": str(WEIGHTS), **EMBED_ARGS, "hf_overrides": {"matryoshka_dimensions": MATRYOSHKA}}
    (version / "model.json").write_text(json.dumps(engine, indent=2))
    reference = ROOT / "triton_models" / "reference" / "tiny-llm-embed"
    (where / REFERENCE_EMBED_MODEL).symlink_to(reference, target_is_directory=True)
    return where


def spawn_vllm_embedding(log: Path) -> Server:
    """vLLM's OpenAI server running the same weights for embeddings (not waited for)."""
    flags: list[str] = []
    for key, value in EMBED_ARGS.items():
        flag = "--" + key.replace("_", "-")
        flags.extend([flag] if value is True else [flag, str(value)])
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(WEIGHTS), "--served-model-name", EMBED_MODEL, "--host", "127.0.0.1", *flags,
        "--hf-overrides", json.dumps({"matryoshka_dimensions": MATRYOSHKA}),
    ]  # fmt: skip
    return _spawn("vllm embeddings", command, log, ENGINE_ENV)


def start_triton(repository: Path, workdir: Path) -> TritonServer:
    """tritonserver as the embedded mode starts it (UTF-8 stubs, auto-complete); the caller stops it."""
    server = TritonServer(
        repository, log_file=workdir / "tritonserver.log", ready_timeout=300.0, extra_env=dict(ENGINE_ENV)
    )
    return server.start()


@dataclass
class Server:
    """A server process of the lane (the gateway or vLLM's own), started in its own session."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited during startup:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to the whole process group (vLLM's engine core is a child), then SIGKILL."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass


def _spawn(name: str, command: list[str], log: Path, env: dict[str, str]) -> Server:
    port = free_port()
    command = [*command, "--port", str(port)]
    with open(log, "ab") as handle:
        process = subprocess.Popen(  # noqa: S603 - our interpreter, our arguments
            command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            cwd=ROOT,
            start_new_session=True,
        )
    return Server(name, f"http://127.0.0.1:{port}", process, log)


def spawn_vllm(log: Path) -> Server:
    """vLLM's OpenAI server on the same weights and engine arguments (not waited for)."""
    flags: list[str] = []
    for key, value in ENGINE_ARGS.items():
        flag = "--" + key.replace("_", "-")
        flags.extend([flag] if value is True else [flag, str(value)])
    loras = [f"{name}={path}" for name, path in ADAPTERS.items()]
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(WEIGHTS), "--served-model-name", MODEL, "--host", "127.0.0.1",
        *flags, "--lora-modules", *loras,
        # tool calling as the gateway detects it from tiny-llm's template (Qwen 2.5's hermes prompt)
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    ]  # fmt: skip
    return _spawn("vllm", command, log, ENGINE_ENV)


def spawn_embedded_gateway(repository: Path, log: Path, env: dict[str, str]) -> Server:
    """``python -m gateway --embedded``, exactly as a user runs it (not waited for)."""
    command = [sys.executable, "-m", "gateway", "--embedded", "--model-repository", str(repository)]
    command += ["--triton-log-file", str(log.with_name("tritonserver-embedded.log")), "--log-level", "info"]
    return _spawn("embedded gateway", command, log, {**ENGINE_ENV, **env})


def spawn_gateway(triton_url: str, repository: Path, log: Path) -> Server:
    command = [
        sys.executable, "-m", "gateway", "--triton-url", triton_url, "--model-repository", str(repository),
        "--log-level", "info",
    ]  # fmt: skip
    # The backend here is a "python" model (its model.py is the vLLM backend's), which the gateway
    # cannot tell from a model that takes logit_bias: say it (docs/API.md, logit_bias).
    return _spawn("gateway", command, log, {"GATEWAY_MODEL_LIMITS": json.dumps({MODEL: {"logit_bias": False}})})
