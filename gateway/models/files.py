"""What a Triton model repository on disk says about a model: the files Triton's vLLM backend
reads. ``<model>/<version>/model.json`` (``"model"``: the weights directory, ``"max_model_len"``)
and ``<model>/<version>/multi_lora.json`` (adapter name → path). Relative paths there are
resolved against the file's directory. Triton cannot tell the gateway any of this (tokenizer,
chat template, adapters, context length), so it is read here.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalModelFiles:
    """What the model repository says about one model."""

    tokenizer_dir: Path | None = None
    adapters: tuple[str, ...] = ()
    max_model_len: int | None = None


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


def read_local_model_files(repository: Path, name: str) -> LocalModelFiles:
    """Look up ``name`` in a Triton model repository on disk; empty if it is not there."""
    model_dir = repository / name
    if not model_dir.is_dir():
        return LocalModelFiles()
    for version in _version_dirs(model_dir):
        engine = _read_json(version / "model.json") if (version / "model.json").is_file() else {}
        loras = _read_json(version / "multi_lora.json") if (version / "multi_lora.json").is_file() else {}
        if not engine and not loras:
            continue
        tokenizer_dir: Path | None = None
        weights = engine.get("tokenizer") or engine.get("model")
        if isinstance(weights, str):
            candidate = (version / weights).resolve()
            tokenizer_dir = candidate if candidate.is_dir() else None
        max_len = engine.get("max_model_len")
        return LocalModelFiles(
            tokenizer_dir=tokenizer_dir,
            adapters=tuple(sorted(str(k) for k in loras)),
            max_model_len=int(max_len) if isinstance(max_len, int) else None,
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
