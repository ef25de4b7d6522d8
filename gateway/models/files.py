"""What a Triton model repository on disk says about a model: the files Triton's vLLM backend
reads. ``<model>/<version>/model.json`` (``"tokenizer"``, else ``"model"``: the tokenizer's folder
or hub id; ``"max_model_len"``), ``<model>/<version>/multi_lora.json`` (adapter name → path) and
the weights' ``config.json`` (the context length vLLM derives when ``model.json`` sets none,
``context_length``). Triton cannot tell the gateway any of this (tokenizer, chat template,
adapters, context length), so it is read here.

The backend hands ``model.json``'s values to vLLM unchanged, and vLLM takes a name that is a
directory *relative to its working directory* (tritonserver's: the stub inherits it) as a local
model, and anything else as a hub id, which it loads from the Hugging Face cache. The gateway
follows the same order (``ModelFileSources``), then falls back to the JSON file's own folder:
that is how the project's reference model reads the same file, so its shipped repository can be
mounted anywhere.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.models.context_length import SENTENCE_CONFIGS, derive_max_model_len
from gateway.models.hub import is_repo_id, snapshot_dir

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelFileSources:
    """Where the names in ``model.json`` lead, as seen from the backend."""

    working_dir: Path | None = None
    """tritonserver's working directory (relative paths in vLLM's hands), if known."""
    hub_cache: Path | None = None
    """The Hugging Face hub cache Triton's vLLM loads hub ids from, if it is readable here."""


@dataclass(frozen=True)
class LocalModelFiles:
    """What the model repository says about one model."""

    tokenizer_dir: Path | None = None
    adapters: tuple[str, ...] = ()
    max_model_len: int | None = None
    """``model.json``'s ``max_model_len`` (a positive number; vLLM's ``-1``, fit to memory at
    start, is not a length the gateway can know)."""
    derived_max_model_len: int | None = None
    """The context length vLLM derives from the weights' ``config.json`` (``context_length``);
    the engine's when ``max_model_len`` is not set. None: no config found, or no length in it."""
    tokenizer_ref: str | None = None
    """The tokenizer as ``model.json`` names it (a path or a hub id), found or not."""
    adapter_dirs: tuple[tuple[str, Path | None], ...] = ()
    """``multi_lora.json``'s adapters in the file's order, each with its folder where found (a
    path as given, else relative to Triton's working directory, else to the file's folder):
    TensorRT-LLM models number their LoRA tasks in this order."""
    runner: str | None = None
    """``pooling`` when ``model.json`` makes vLLM run the model as an embedding model
    (``"runner": "pooling"``, or ``"convert": "embed"``), ``generate`` when it says so; else None."""
    matryoshka_dimensions: tuple[int, ...] | None = None
    """The output sizes ``model.json``'s ``hf_overrides`` allow (``matryoshka_dimensions``); ``()``
    with ``is_matryoshka`` and no list (any size); None: the model's full size only."""
    vision: bool | None = None
    """Whether the model takes images, as ``model.json`` tells vLLM: ``limit_mm_per_prompt``'s
    ``image`` count (0: none), else the weights it names (their ``config.json`` has a
    ``vision_config``: LLaVA, Qwen2-VL, Gemma 3, BLIP-2...). None: neither is found here."""


def _vision(engine: dict[str, Any], config: dict[str, Any] | None) -> bool | None:
    """Triton's vLLM backend declares its ``image`` input on every model, text-only ones too, so
    the input alone does not say whether the model can see: what vLLM is told does."""
    limits = engine.get("limit_mm_per_prompt")
    if isinstance(limits, dict) and isinstance(limits.get("image"), int):
        return bool(limits["image"] > 0)
    if config is None:
        return None
    return "vision_config" in config


def _weights_config(model_dir: Path | None) -> dict[str, Any] | None:
    """The weights' ``config.json``, or None where the folder or file is not found here."""
    if model_dir is None or not (model_dir / "config.json").is_file():
        return None
    return _read_json(model_dir / "config.json")


def _derived_length(
    engine: dict[str, Any], config: dict[str, Any] | None, model_dir: Path | None, tokenizer_dir: Path | None
) -> int | None:
    """``context_length.derive_max_model_len`` on the files vLLM reads for it."""
    if config is None or model_dir is None:
        return None
    pooling = _runner(engine) == "pooling"
    tokenizer_config = None
    if pooling and tokenizer_dir is not None and (tokenizer_dir / "tokenizer_config.json").is_file():
        tokenizer_config = _read_json(tokenizer_dir / "tokenizer_config.json")
    sentence_config = next(
        (_read_json(model_dir / name) for name in SENTENCE_CONFIGS if (model_dir / name).is_file()), None
    )
    return derive_max_model_len(
        config, engine, tokenizer_config=tokenizer_config, sentence_config=sentence_config or None, pooling=pooling
    )


def resolve_tokenizer(
    ref: str, revision: str | None, sources: ModelFileSources, json_dir: Path | None = None
) -> Path | None:
    """The folder ``ref`` (a path or a hub id) names, looked up where vLLM looks, in its order: an
    absolute path; a path relative to Triton's working directory; a hub id in the cache at
    ``revision``. Then, for the reference model's convention, a path relative to ``json_dir``."""
    path = Path(ref)
    if path.is_absolute():
        return path if path.is_dir() else None
    if sources.working_dir is not None and (sources.working_dir / path).is_dir():
        return (sources.working_dir / path).resolve()
    if sources.hub_cache is not None and is_repo_id(ref):
        snapshot = snapshot_dir(sources.hub_cache, ref, revision)
        if snapshot is not None:
            return snapshot
    if json_dir is not None and (json_dir / path).is_dir():
        return (json_dir / path).resolve()
    return None


def _version_dirs(model_dir: Path) -> list[Path]:
    versions = [p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(versions, key=lambda p: int(p.name), reverse=True)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("cannot read %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _runner(engine: dict[str, Any]) -> str | None:
    """vLLM's engine args: ``runner`` (0.10 on), ``convert: "embed"``, or the older ``task``."""
    runner = _text(engine.get("runner"))
    if runner in ("pooling", "generate"):
        return runner
    if engine.get("convert") == "embed" or engine.get("task") == "embed":
        return "pooling"
    return None


def _matryoshka(overrides: Any) -> tuple[int, ...] | None:
    if not isinstance(overrides, dict):
        return None
    sizes = overrides.get("matryoshka_dimensions")
    if isinstance(sizes, list) and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in sizes):
        return tuple(sizes)
    return () if overrides.get("is_matryoshka") is True else None


def read_local_model_files(repository: Path, name: str, sources: ModelFileSources | None = None) -> LocalModelFiles:
    """Look up ``name`` in a Triton model repository on disk; empty if it is not there."""
    sources = sources or ModelFileSources()
    model_dir = repository / name
    if not model_dir.is_dir():
        return LocalModelFiles()
    for version in _version_dirs(model_dir):
        engine = _read_json(version / "model.json") if (version / "model.json").is_file() else {}
        loras = _read_json(version / "multi_lora.json") if (version / "multi_lora.json").is_file() else {}
        if not engine and not loras:
            continue
        # vLLM: the tokenizer defaults to the model, its revision to the model's revision.
        ref = _text(engine.get("tokenizer")) or _text(engine.get("model"))
        revision = _text(engine.get("tokenizer_revision")) or _text(engine.get("revision"))
        max_len = engine.get("max_model_len")
        weights = _text(engine.get("model"))
        weights_dir = resolve_tokenizer(weights, _text(engine.get("revision")), sources, version) if weights else None
        tokenizer_dir = resolve_tokenizer(ref, revision, sources, version) if ref else None
        config = _weights_config(weights_dir)
        return LocalModelFiles(
            vision=_vision(engine, config),
            runner=_runner(engine),
            matryoshka_dimensions=_matryoshka(engine.get("hf_overrides")),
            tokenizer_dir=tokenizer_dir,
            adapters=tuple(sorted(str(k) for k in loras)),
            adapter_dirs=tuple(
                (str(k), resolve_tokenizer(v, None, sources, version) if isinstance(v, str) else None)
                for k, v in loras.items()
            ),
            max_model_len=max_len
            if isinstance(max_len, int) and not isinstance(max_len, bool) and max_len > 0
            else None,
            derived_max_model_len=_derived_length(engine, config, weights_dir, tokenizer_dir),
            tokenizer_ref=ref,
        )
    return LocalModelFiles()


def load_tokenizer(directory: Path) -> Any:
    """The fast tokenizer in ``tokenizer.json``, or None (then ``max_tokens`` cannot default to
    the room the context leaves, and the gateway falls back to ``default_max_tokens``)."""
    path = directory / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - tokenizers is a runtime dependency
        return None
    return Tokenizer.from_file(str(path))
