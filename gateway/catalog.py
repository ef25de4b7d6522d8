"""What the gateway serves: Triton's ready models, their LoRA adapters and chat templates.

The list of models comes from Triton (repository index, refreshed on an interval), so a model
loaded or unloaded there shows up here without a restart. What Triton cannot tell us (which
tokenizer and chat template a model uses, which LoRA adapters it was loaded with, its context
length) is read from the model repository's own files, the ones Triton's vLLM backend reads:
``<model>/<version>/model.json`` (``"model"``: the weights directory, ``"max_model_len"``) and
``<model>/<version>/multi_lora.json`` (adapter name → path). Relative paths there are resolved
against the file's directory.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.backend.types import Backend, BackendModel
from gateway.errors import GatewayError
from gateway.translate.prompts import ChatTemplate

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedModel:
    """A base model as the gateway serves it."""

    name: str
    adapters: tuple[str, ...] = ()
    template: ChatTemplate | None = None
    tokenizer_dir: Path | None = None
    max_model_len: int | None = None
    tokenizer: Any = None
    """A ``tokenizers.Tokenizer`` for counting prompt tokens, when the model's files have one."""
    inputs: frozenset[str] = frozenset()
    """The input tensors Triton says the model takes (they pick the backend contract)."""
    created: int = field(default_factory=lambda: int(time.time()))


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


class ModelCatalog:
    """A snapshot of served models, refreshed from the backend every ``refresh_interval``.

    A stale snapshot is refreshed in the background while requests keep using it, so no request
    waits for Triton's repository index (and the gRPC calls per model) on its own path; only an
    empty snapshot (start-up, or Triton never seen) is refreshed in line.
    """

    def __init__(self, backend: Backend, repositories: list[Path], refresh_interval: float = 10.0) -> None:
        self._backend = backend
        self._repositories = repositories
        self._refresh_interval = refresh_interval
        self._models: dict[str, ServedModel] = {}
        self._refreshed_at = float("-inf")
        self._lock = asyncio.Lock()
        self._templates: dict[Path, ChatTemplate | None] = {}
        self._tokenizers: dict[Path, Any] = {}
        self._background: asyncio.Task[None] | None = None

    def adapter_count(self, name: str) -> int:
        """Adapters of a model in the current snapshot (no refresh: called at scrape time)."""
        model = self._models.get(name)
        return len(model.adapters) if model is not None else 0

    def _stale(self) -> bool:
        return time.monotonic() - self._refreshed_at >= self._refresh_interval

    async def models(self) -> dict[str, ServedModel]:
        """The current snapshot. Raises (503) if it is empty and Triton cannot be reached."""
        if not self._stale():
            return self._models
        if not self._models or self._refresh_interval == 0:
            async with self._lock:
                if self._stale():
                    await self.refresh()
            return self._models
        if self._background is None or self._background.done():
            self._background = asyncio.ensure_future(self._refresh_quietly())
        return self._models

    async def _refresh_quietly(self) -> None:
        async with self._lock:
            if not self._stale():
                return
            try:
                await self.refresh()
            except GatewayError as exc:  # requests keep the last snapshot; Triton's errors reach them
                logger.warning("model list refresh failed: %s", exc.message)
                self._refreshed_at = time.monotonic()  # retry after an interval, not on every request

    async def refresh(self) -> None:
        backend_models = await self._backend.list_models()
        models = {m.name: self._describe(m, self._models.get(m.name)) for m in backend_models}
        self._models = models
        self._refreshed_at = time.monotonic()

    def _describe(self, model: BackendModel, previous: ServedModel | None) -> ServedModel:
        files = LocalModelFiles()
        for repository in self._repositories:  # Triton serves a name from one repository only
            files = read_local_model_files(repository, model.name)
            if files != LocalModelFiles():
                break
        template = self._template(files.tokenizer_dir) if files.tokenizer_dir else None
        return ServedModel(
            name=model.name,
            adapters=files.adapters,
            template=template,
            tokenizer_dir=files.tokenizer_dir,
            max_model_len=files.max_model_len,
            tokenizer=self._tokenizer(files.tokenizer_dir) if files.tokenizer_dir else None,
            inputs=model.inputs,
            created=previous.created if previous else int(time.time()),
        )

    def _tokenizer(self, directory: Path) -> Any:
        if directory not in self._tokenizers:
            self._tokenizers[directory] = load_tokenizer(directory)
        return self._tokenizers[directory]

    def _template(self, directory: Path) -> ChatTemplate | None:
        if directory not in self._templates:
            self._templates[directory] = ChatTemplate.from_directory(directory)
        return self._templates[directory]
