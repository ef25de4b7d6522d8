"""The model catalog: repository files, and refreshes that never hold a request up."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gateway.backend.types import BackendModel
from gateway.errors import BackendUnavailableError
from gateway.models.catalog import ModelCatalog
from gateway.models.files import read_local_model_files

pytestmark = pytest.mark.anyio
WEIGHTS = Path(__file__).resolve().parents[2] / "triton_models" / "weights" / "tiny-llm"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class SlowBackend:
    def __init__(self, names: list[str], delay: float = 0.0) -> None:
        self.names, self.delay, self.calls, self.down = names, delay, 0, False

    async def list_models(self) -> list[BackendModel]:
        self.calls += 1
        await asyncio.sleep(self.delay)
        if self.down:
            raise BackendUnavailableError("down")
        return [BackendModel(name=n) for n in self.names]


def test_repository_files_resolve_relative_paths_and_adapters(tmp_path: Path) -> None:
    version = tmp_path / "m" / "3"
    version.mkdir(parents=True)
    (version / "model.json").write_text(json.dumps({"model": str(WEIGHTS), "max_model_len": 99}))
    (version / "multi_lora.json").write_text(json.dumps({"b": "x", "a": "y"}))
    files = read_local_model_files(tmp_path, "m")
    assert files.tokenizer_dir == WEIGHTS and files.max_model_len == 99 and files.adapters == ("a", "b")
    # a relative "model" path is resolved against model.json's directory
    (version / "model.json").write_text(json.dumps({"model": "../../../elsewhere"}))
    (tmp_path.parent / "elsewhere").mkdir(exist_ok=True)
    assert read_local_model_files(tmp_path, "m").tokenizer_dir == (tmp_path.parent / "elsewhere").resolve()


def test_missing_or_hub_model_has_no_tokenizer(tmp_path: Path) -> None:
    assert read_local_model_files(tmp_path, "nope").tokenizer_dir is None
    version = tmp_path / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(json.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct"}))
    assert read_local_model_files(tmp_path, "m").tokenizer_dir is None


async def test_stale_snapshot_is_served_while_it_refreshes_in_the_background() -> None:
    backend = SlowBackend(["a"], delay=0.2)
    catalog = ModelCatalog(backend, [], refresh_interval=0.05)  # type: ignore[arg-type]
    assert set(await catalog.models()) == {"a"}  # empty: refreshed in line
    backend.names = ["a", "b"]
    await asyncio.sleep(0.06)
    started = asyncio.get_running_loop().time()
    assert set(await catalog.models()) == {"a"}  # stale: answered at once
    assert asyncio.get_running_loop().time() - started < 0.2  # the refresh takes 0.2 s: not waited for
    await asyncio.sleep(0.3)
    assert set(await catalog.models()) == {"a", "b"}


async def test_failed_background_refresh_keeps_the_snapshot() -> None:
    backend = SlowBackend(["a"])
    catalog = ModelCatalog(backend, [], refresh_interval=0.01)  # type: ignore[arg-type]
    await catalog.models()
    backend.down = True
    await asyncio.sleep(0.02)
    assert set(await catalog.models()) == {"a"}
    await asyncio.sleep(0.05)
    assert set(await catalog.models()) == {"a"}


async def test_empty_snapshot_with_triton_down_raises_503() -> None:
    backend = SlowBackend(["a"])
    backend.down = True
    catalog = ModelCatalog(backend, [], refresh_interval=10)  # type: ignore[arg-type]
    with pytest.raises(BackendUnavailableError):
        await catalog.models()
