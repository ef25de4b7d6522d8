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


class Clock:
    """A monotonic clock the test moves: staleness without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SlowBackend:
    """Lists ``names``; while ``gate`` is set and closed, a listing waits for it to open."""

    def __init__(self, names: list[str]) -> None:
        self.names, self.calls, self.down = names, 0, False
        self.gate: asyncio.Event | None = None

    async def list_models(self) -> list[BackendModel]:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
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


async def settle() -> None:
    """Let the catalog's background refresh run to its end (it awaits nothing but the gate)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_stale_snapshot_is_served_while_it_refreshes_in_the_background() -> None:
    clock, backend = Clock(), SlowBackend(["a"])
    catalog = ModelCatalog(backend, [], refresh_interval=10, clock=clock)  # type: ignore[arg-type]
    assert set(await catalog.models()) == {"a"}  # empty: refreshed in line
    backend.names, backend.gate = ["a", "b"], asyncio.Event()
    clock.now = 10.0
    # stale: answered at once, while the refresh it started waits on the closed gate
    assert set(await asyncio.wait_for(catalog.models(), 5)) == {"a"}
    assert backend.calls == 2
    backend.gate.set()
    await settle()
    assert set(await catalog.models()) == {"a", "b"}


async def test_failed_background_refresh_keeps_the_snapshot() -> None:
    clock, backend = Clock(), SlowBackend(["a"])
    catalog = ModelCatalog(backend, [], refresh_interval=10, clock=clock)  # type: ignore[arg-type]
    await catalog.models()
    backend.down = True
    clock.now = 10.0
    assert set(await catalog.models()) == {"a"}
    await settle()
    assert backend.calls == 2  # the refresh ran and failed
    assert set(await catalog.models()) == {"a"}
    assert backend.calls == 2  # retried after an interval, not on every request
    clock.now = 20.0
    assert set(await catalog.models()) == {"a"}
    await settle()
    assert backend.calls == 3


async def test_empty_snapshot_with_triton_down_raises_503() -> None:
    backend = SlowBackend(["a"])
    backend.down = True
    catalog = ModelCatalog(backend, [], refresh_interval=10)  # type: ignore[arg-type]
    with pytest.raises(BackendUnavailableError):
        await catalog.models()
