"""What the gateway serves: Triton's ready models, their LoRA adapters and chat templates.

The list of models comes from Triton (repository index, refreshed on an interval), so a model
loaded or unloaded there shows up here without a restart. What Triton cannot tell us (which
tokenizer and chat template a model uses, which LoRA adapters it was loaded with, its context
length) is read from the model repository's own files (``files.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.backend.types import Backend, BackendModel
from gateway.errors import GatewayError
from gateway.models.files import LocalModelFiles, load_tokenizer, read_local_model_files
from gateway.models.templates import ChatTemplate

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedModel:
    """A base model as the gateway serves it."""

    name: str
    adapters: tuple[str, ...] = ()
    template: ChatTemplate | None = None
    max_model_len: int | None = None
    tokenizer: Any = None
    """A ``tokenizers.Tokenizer`` for counting prompt tokens, when the model's files have one."""
    inputs: frozenset[str] = frozenset()
    """The input tensors Triton says the model takes (they pick the backend contract)."""
    backend: str = ""
    """Triton's ``backend`` (else ``platform``) in the model's config: ``vllm``, ``python``, ``ensemble``."""
    created: int = field(default_factory=lambda: int(time.time()))


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
            max_model_len=files.max_model_len,
            tokenizer=self._tokenizer(files.tokenizer_dir) if files.tokenizer_dir else None,
            inputs=model.inputs,
            backend=model.platform,
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
