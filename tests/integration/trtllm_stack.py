"""The TensorRT-LLM stand-in stack (``tests/triton_models_trtllm``) on a real tritonserver.

``fill_repository`` copies the repository, gives each Python-backend stand-in its ``model.py``
(``tests/trtllm_stand_ins/entry.py``), and fills its ``${...}`` placeholders with absolute
paths (the configs cannot hold paths relative to the checkout: Triton hands parameters to the
models verbatim), and writes ``multi_lora.json`` into the version directories where Triton's OpenAI
frontend looks for TensorRT-LLM adapters (name → directory of ``model.lora_weights.npy`` and
``model.lora_config.npy``). ``start_trtllm_triton`` fills a copy under ``tmp_dir`` and starts
Triton on it, ready, with auto-complete off (every stand-in declares its whole interface).
Only the two generating stand-ins (``tensorrt_llm``, ``tensorrt_llm_nd``) import torch; the
others load in a fraction of a second, and the stack is ready in 3-7 s here. Triton 2.51's Python
backend aborts now and then when four or more Python models load at once, so models load two at a
time (``--model-load-thread-count=2``, no slower here: two cores), and a start that crashes anyway
is tried again by ``TritonServer.start``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from gateway.triton_launcher import TritonServer

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "tests" / "triton_models_trtllm"
ASSETS = ROOT / "tests" / "trtllm_stand_ins" / "assets"
TOKENIZER_DIR = ASSETS / "tiny-sp"
LORA_DIR = ASSETS / "lora"
ENTRY = ROOT / "tests" / "trtllm_stand_ins" / "entry.py"
"""Every Python-backend stand-in's ``model.py`` (its ``stand_in_entry`` parameter picks the class)."""
ENGINE_DIR = ROOT / "triton_models" / "weights" / "tiny-llm"
LORA_ADAPTERS = {"alpha": LORA_DIR / "alpha", "beta": LORA_DIR / "beta"}
"""multi_lora.json's entries, in order: Triton's OpenAI frontend numbers task ids 1, 2, ... this way."""

PLACEHOLDERS = {
    "stand_in_python_path": ROOT,
    "tokenizer_dir": TOKENIZER_DIR,
    "engine_dir": ENGINE_DIR,
}
MULTI_LORA_MODELS = ("ensemble", "ensemble_nd", "tensorrt_llm", "tensorrt_llm_bls", "tensorrt_llm_bls_acc")
MODELS = (
    "preprocessing",
    "postprocessing",
    "tensorrt_llm",
    "tensorrt_llm_nd",
    "ensemble",
    "ensemble_nd",
    "tensorrt_llm_bls",
    "tensorrt_llm_bls_acc",
    "llmapi",
    "ensemble_v05",
)
_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def fill_template(text: str) -> str:
    """``${name}`` → the absolute path of PLACEHOLDERS; an unknown name is an error."""

    def value(match: re.Match[str]) -> str:
        name = match[1]
        if name not in PLACEHOLDERS:
            raise KeyError(f"unknown placeholder ${{{name}}} in a stand-in config")
        return str(PLACEHOLDERS[name])

    return _PLACEHOLDER.sub(value, text)


def fill_repository(dest: Path) -> Path:
    """Copy the stand-in repository to ``dest`` (created) with its placeholders filled; return it."""
    shutil.copytree(REPOSITORY, dest, ignore=shutil.ignore_patterns("__pycache__", "README.md"))
    for config in dest.glob("*/config.pbtxt"):
        text = config.read_text(encoding="utf-8")
        config.write_text(fill_template(text), encoding="utf-8")
        if '"stand_in_entry"' in text:  # a Python-backend stand-in: the one entry file is its model.py
            (config.parent / "1").mkdir(exist_ok=True)
            shutil.copyfile(ENTRY, config.parent / "1" / "model.py")
    adapters = {name: str(path) for name, path in LORA_ADAPTERS.items()}
    for model in MULTI_LORA_MODELS:
        (dest / model / "1" / "multi_lora.json").write_text(json.dumps(adapters, indent=2) + "\n", encoding="utf-8")
    return dest


def start_trtllm_triton(tmp_dir: Path, log: Path) -> TritonServer:
    """A started, ready tritonserver serving the filled stand-in repository."""
    repository = fill_repository(tmp_dir / "trtllm_repository")
    server = TritonServer(
        repository, log_file=log, auto_complete_config=False, extra_args=("--model-load-thread-count=2",)
    )
    server.start()
    return server
