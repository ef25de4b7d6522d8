"""Read and validate ``model.json`` and ``multi_lora.json`` (the vLLM-backend layout).

Why a module of its own: the model must fail at load with a clear message when its configuration is
wrong (instead of failing on the first request), and the gateway reads the very same two files to
find the tokenizer and the adapter names, so their format is a contract worth testing on its own.

Relative paths in both files are resolved against the directory of the json file, so the model
repository can be moved or mounted anywhere.

One setting comes from the environment instead, ``TINY_LLM_STEP_DELAY_MS``: it belongs to a
process (one replica of several started from the same repository is made slow), not to the model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL_JSON = "model.json"
MULTI_LORA_JSON = "multi_lora.json"

# Keys accepted in model.json, with their defaults. "model" is required. The names follow vLLM's
# engine arguments where one exists, so the file reads like a vLLM model.json.
_MODEL_JSON_DEFAULTS: dict[str, Any] = {
    "max_model_len": 131072,
    "enable_lora": False,
    "max_lora_rank": 8,
    "max_logprobs": 20,
    "max_num_seqs": 256,
    "num_threads": 1,
    "limit_mm_per_prompt": {"image": 0},
    "kv_cache_tokens": 65536,
}

STEP_DELAY_ENV = "TINY_LLM_STEP_DELAY_MS"


def _check_images(path: Path, limits: Any) -> int:
    if not isinstance(limits, dict) or set(limits) - {"image"}:
        raise ModelConfigError(f"{path}: 'limit_mm_per_prompt' must be an object with at most an 'image' count")
    return _check_int(path, "limit_mm_per_prompt.image", limits.get("image", 0), 0)


class ModelConfigError(ValueError):
    """model.json or multi_lora.json is missing, malformed or points at something that is not there."""


@dataclass(frozen=True)
class ModelConfig:
    """Everything the engine needs, with paths already resolved and checked."""

    model_dir: Path
    """Hugging Face model directory (config.json, model.safetensors, tokenizer files)."""
    max_model_len: int = 131072
    """Prompt plus generated tokens never exceed this; generation ends with "length" there."""
    enable_lora: bool = False
    """Load the adapters of multi_lora.json (like vLLM, adapters are ignored when false)."""
    max_lora_rank: int = 8
    """Adapters with a larger rank are refused at load, as vLLM does."""
    max_logprobs: int = 20
    """Largest ``logprobs`` a request may ask for (vLLM's default is 20)."""
    max_num_seqs: int = 256
    """Largest number of sequences generating at once; ``n`` may not exceed it either."""
    max_images: int = 0
    """Images one request may carry (vLLM's ``limit_mm_per_prompt: {"image": N}``); more are refused."""
    num_threads: int = 1
    """torch intra-op threads. Small on purpose: the machine has 2 cores shared with Triton itself."""
    kv_cache_tokens: int = 65536
    """The KV cache's size in tokens, as ``vllm:kv_cache_usage_perc`` divides by it. The caches are
    not actually bounded (each sequence's grows as it needs): the number only scales the gauge."""
    adapters: dict[str, Path] = field(default_factory=dict)
    """LoRA adapter name -> adapter directory, in multi_lora.json order."""


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ModelConfigError(f"{path} is missing") from exc
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _check_int(path: Path, key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ModelConfigError(f"{path}: '{key}' must be an integer >= {minimum}, got {value!r}")
    return value


def load_adapters(version_dir: Path, enable_lora: bool, max_lora_rank: int) -> dict[str, Path]:
    """Read multi_lora.json (optional unless LoRA is enabled) and check every adapter directory."""
    path = version_dir / MULTI_LORA_JSON
    if not enable_lora:
        return {}
    raw = _read_json_object(path)
    adapters: dict[str, Path] = {}
    for name, location in raw.items():
        if not name or not isinstance(location, str):
            raise ModelConfigError(f"{path}: entry {name!r} must map a non-empty name to a path string")
        adapter_dir = (version_dir / location).resolve()
        adapter_config = adapter_dir / "adapter_config.json"
        rank = _read_json_object(adapter_config).get("r")
        if not isinstance(rank, int) or rank > max_lora_rank:
            raise ModelConfigError(
                f"{adapter_config}: LoRA rank {rank!r} of adapter '{name}' exceeds max_lora_rank {max_lora_rank}"
            )
        adapters[name] = adapter_dir
    return adapters


def load_model_config(version_dir: Path) -> ModelConfig:
    """Load ``<version_dir>/model.json`` (+ ``multi_lora.json``); raise ModelConfigError on any problem."""
    path = version_dir / MODEL_JSON
    raw = _read_json_object(path)
    unknown = sorted(set(raw) - set(_MODEL_JSON_DEFAULTS) - {"model"})
    if unknown:
        raise ModelConfigError(
            f"{path}: unknown keys {unknown}; known keys are {sorted([*_MODEL_JSON_DEFAULTS, 'model'])}"
        )
    if not isinstance(raw.get("model"), str):
        raise ModelConfigError(f"{path}: 'model' (path to the weights directory) is required")
    model_dir = (version_dir / raw["model"]).resolve()
    if not (model_dir / "config.json").is_file():
        raise ModelConfigError(f"{path}: 'model' points at {model_dir}, which has no config.json")
    values = {**_MODEL_JSON_DEFAULTS, **{k: v for k, v in raw.items() if k != "model"}}
    if not isinstance(values["enable_lora"], bool):
        raise ModelConfigError(f"{path}: 'enable_lora' must be true or false")
    max_model_len = _check_int(path, "max_model_len", values["max_model_len"], 2)
    max_lora_rank = _check_int(path, "max_lora_rank", values["max_lora_rank"], 1)
    return ModelConfig(
        model_dir=model_dir,
        max_model_len=max_model_len,
        enable_lora=values["enable_lora"],
        max_lora_rank=max_lora_rank,
        max_logprobs=_check_int(path, "max_logprobs", values["max_logprobs"], 0),
        max_num_seqs=_check_int(path, "max_num_seqs", values["max_num_seqs"], 1),
        num_threads=_check_int(path, "num_threads", values["num_threads"], 1),
        max_images=_check_images(path, values["limit_mm_per_prompt"]),
        kv_cache_tokens=_check_int(path, "kv_cache_tokens", values["kv_cache_tokens"], 1),
        adapters=load_adapters(version_dir, values["enable_lora"], max_lora_rank),
    )


def step_delay_from_env(environ: Mapping[str, str]) -> float:
    """``TINY_LLM_STEP_DELAY_MS`` in seconds (unset or empty: 0); a bad value fails the model's load."""
    raw = environ.get(STEP_DELAY_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        milliseconds = float(raw)
    except ValueError:
        milliseconds = math.nan
    if not math.isfinite(milliseconds) or milliseconds < 0:
        raise ModelConfigError(f"{STEP_DELAY_ENV} must be a number of milliseconds >= 0, got {raw!r}")
    return milliseconds / 1000.0
