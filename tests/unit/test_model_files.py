"""Model repositories as Triton's vLLM backend reads them: hub ids in the local Hugging Face cache,
relative paths against Triton's working directory, and the per-model override setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.backend.types import BackendModel
from gateway.config import ModelFiles, Settings, default_hub_cache
from gateway.models.catalog import ModelCatalog
from gateway.models.files import ModelFileSources, read_local_model_files
from gateway.models.hub import is_repo_id, snapshot_dir
from gateway.triton_launcher import TritonLaunchError, check_stub_numpy
from tests.hf_cache import put_in_hub_cache

WEIGHTS = Path(__file__).resolve().parents[2] / "triton_models" / "weights" / "tiny-llm"
REPO_ID = "acme/tiny-chat"
OTHER_TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}{{ eos_token }}"


def _model_json(repository: Path, name: str, engine: dict[str, object]) -> Path:
    version = repository / name / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(json.dumps(engine))
    return version


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """main → one commit with the shipped tokenizer; tag v2 → another commit with another template."""
    hub = tmp_path / "hub"
    put_in_hub_cache(hub, REPO_ID, WEIGHTS, ref="main", commit="a" * 40)
    other = tmp_path / "other-weights"
    other.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (other / name).write_bytes((WEIGHTS / name).read_bytes())
    (other / "chat_template.jinja").write_text(OTHER_TEMPLATE)
    put_in_hub_cache(hub, REPO_ID, other, ref="v2", commit="b" * 40)
    return hub


@pytest.mark.parametrize(
    ("revision", "commit"), [(None, "a" * 40), ("main", "a" * 40), ("v2", "b" * 40), ("b" * 40, "b" * 40)]
)
def test_snapshot_follows_refs_like_huggingface_hub(cache: Path, revision: str | None, commit: str) -> None:
    found = snapshot_dir(cache, REPO_ID, revision)
    assert found == cache / "models--acme--tiny-chat" / "snapshots" / commit
    assert (found / "tokenizer.json").is_file()  # the symlink leads to the blob


def test_snapshot_lookup_agrees_with_huggingface_hub(cache: Path) -> None:
    """The oracle: huggingface_hub's own offline lookup, on the same cache."""
    hf = pytest.importorskip("huggingface_hub")
    for revision in (None, "main", "v2", "b" * 40, "nope", "c" * 40):
        ours = snapshot_dir(cache, REPO_ID, revision)
        theirs = hf.try_to_load_from_cache(REPO_ID, "tokenizer.json", cache_dir=cache, revision=revision)
        assert (str(ours / "tokenizer.json") if ours else None) == (theirs if isinstance(theirs, str) else None)
    assert snapshot_dir(cache, "acme/absent") is None
    assert hf.try_to_load_from_cache("acme/absent", "tokenizer.json", cache_dir=cache) is None


def test_transformers_loads_the_cache_layout_offline(cache: Path) -> None:
    """The test cache is a real one: transformers finds the tokenizer there without a network."""
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(REPO_ID, cache_dir=str(cache), local_files_only=True)
    assert tokenizer.encode("hello") == transformers.AutoTokenizer.from_pretrained(str(WEIGHTS)).encode("hello")


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"HF_HOME": "/srv/hf"},
        {"HF_HOME": "/srv/hf", "HF_HUB_CACHE": "/cache/hub"},
        {"HUGGINGFACE_HUB_CACHE": "/legacy/hub", "HF_HOME": "/srv/hf"},
        {"HF_HUB_CACHE": "/cache/hub", "HUGGINGFACE_HUB_CACHE": "/legacy/hub"},
        {"XDG_CACHE_HOME": "/xdg"},
        {"HF_HOME": "~/hf"},
    ],
)
def test_default_cache_is_where_huggingface_hub_looks(env: dict[str, str]) -> None:
    pytest.importorskip("huggingface_hub")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "XDG_CACHE"))}
    clean.update(env)
    theirs = subprocess.run(
        [sys.executable, "-c", "from huggingface_hub import constants; print(constants.HF_HUB_CACHE)"],
        env=clean,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert str(default_hub_cache(clean)) == theirs


@pytest.mark.parametrize("value", ["gpt2", "facebook/opt-125m", "org/Name_1.5-x"])
def test_repo_ids(value: str) -> None:
    assert is_repo_id(value)


@pytest.mark.parametrize("value", ["../x", "a/b/c", "/abs/path", "org/--x", "org/x.", "-org/x", "a..b", "org/"])
def test_not_repo_ids(value: str) -> None:
    assert not is_repo_id(value)


def test_model_json_hub_id_with_revisions(tmp_path: Path, cache: Path) -> None:
    repository = tmp_path / "repo"
    sources = ModelFileSources(hub_cache=cache)
    snapshots = cache / "models--acme--tiny-chat" / "snapshots"
    _model_json(repository, "main", {"model": REPO_ID})
    _model_json(repository, "tagged", {"model": REPO_ID, "revision": "v2"})
    # vLLM: the tokenizer defaults to the model, and its revision to the model's revision
    _model_json(repository, "tok-rev", {"model": "/nowhere", "tokenizer": REPO_ID, "tokenizer_revision": "v2"})
    _model_json(repository, "tok-model-rev", {"model": REPO_ID, "revision": "main", "tokenizer_revision": "v2"})
    assert read_local_model_files(repository, "main", sources).tokenizer_dir == snapshots / ("a" * 40)
    assert read_local_model_files(repository, "tagged", sources).tokenizer_dir == snapshots / ("b" * 40)
    assert read_local_model_files(repository, "tok-rev", sources).tokenizer_dir == snapshots / ("b" * 40)
    assert read_local_model_files(repository, "tok-model-rev", sources).tokenizer_dir == snapshots / ("b" * 40)
    # not in the cache (or no cache known): no tokenizer, and the name is kept for the warning
    _model_json(repository, "absent", {"model": "acme/absent"})
    assert read_local_model_files(repository, "absent", sources).tokenizer_ref == "acme/absent"
    assert read_local_model_files(repository, "absent", sources).tokenizer_dir is None
    assert read_local_model_files(repository, "main").tokenizer_dir is None


def test_relative_paths_resolve_against_tritons_working_dir_first(tmp_path: Path, cache: Path) -> None:
    """vLLM gets the path unchanged and resolves it against its (Triton's) working directory;
    then a name is a hub id; the JSON file's folder (the reference model's convention) comes last."""
    repository, cwd = tmp_path / "repo", tmp_path / "triton-cwd"
    version = _model_json(repository, "m", {"model": "weights/tok"})
    (cwd / "weights" / "tok").mkdir(parents=True)
    (version / "weights" / "tok").mkdir(parents=True)
    with_cwd = ModelFileSources(working_dir=cwd, hub_cache=cache)
    assert read_local_model_files(repository, "m", with_cwd).tokenizer_dir == cwd / "weights" / "tok"
    assert read_local_model_files(repository, "m").tokenizer_dir == version / "weights" / "tok"
    # a hub id that is also a folder in Triton's working directory: vLLM takes the folder
    (cwd / "acme" / "tiny-chat").mkdir(parents=True)
    (version / "model.json").write_text(json.dumps({"model": REPO_ID}))
    assert read_local_model_files(repository, "m", with_cwd).tokenizer_dir == cwd / "acme" / "tiny-chat"
    # ...and the cache before a folder beside model.json
    (version / "acme" / "tiny-chat").mkdir(parents=True)
    cached = cache / "models--acme--tiny-chat" / "snapshots" / ("a" * 40)
    assert read_local_model_files(repository, "m", ModelFileSources(hub_cache=cache)).tokenizer_dir == cached


class _Backend:
    def __init__(self, *names: str) -> None:
        self.names = names

    async def list_models(self) -> list[BackendModel]:
        return [BackendModel(name=n) for n in self.names]


async def _describe(catalog: ModelCatalog) -> dict[str, object]:
    await catalog.refresh()
    return await catalog.models()  # type: ignore[return-value]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_catalog_serves_the_hub_models_template(tmp_path: Path, cache: Path, anyio_backend: str) -> None:
    repository = tmp_path / "repo"
    _model_json(repository, "hubbed", {"model": REPO_ID, "revision": "v2", "max_model_len": 64})
    catalog = ModelCatalog(_Backend("hubbed"), [repository], sources=ModelFileSources(hub_cache=cache))  # type: ignore[arg-type]
    model = (await catalog.models())["hubbed"]
    assert model.template is not None and model.tokenizer is not None and model.max_model_len == 64
    eos = json.loads((WEIGHTS / "tokenizer_config.json").read_text())["eos_token"]
    assert model.template.render([{"role": "user", "content": "hi"}]) == f"<user>hi{eos}"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_model_files_setting_wins_and_covers_models_outside_any_repository(
    tmp_path: Path, cache: Path, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    repository = tmp_path / "repo"
    _model_json(repository, "listed", {"model": "acme/absent", "max_model_len": 10})
    template = tmp_path / "chat.jinja"
    template.write_text("[{{ messages[0]['content'] }}]{{ bos_token }}")
    settings = Settings(
        hf_hub_cache=cache,
        model_files={
            "listed": {"tokenizer": REPO_ID, "max_model_len": 4096},
            "remote": {"tokenizer": str(WEIGHTS), "chat_template": str(template)},
            "template-only": {"chat_template": str(template)},
        },
    )
    catalog = ModelCatalog(
        _Backend("listed", "remote", "template-only", "bare"),  # type: ignore[arg-type]
        [repository],
        sources=ModelFileSources(hub_cache=settings.hf_hub_cache),
        overrides=settings.model_files,
    )
    models = await catalog.models()
    listed, remote, bare = models["listed"], models["remote"], models["bare"]
    assert listed.tokenizer is not None and listed.max_model_len == 4096
    assert listed.template is not None and "<|" in listed.template.render([{"role": "user", "content": "x"}])
    bos = json.loads((WEIGHTS / "tokenizer_config.json").read_text())["bos_token"]
    assert remote.template is not None and remote.template.render([{"role": "user", "content": "x"}]) == f"[x]{bos}"
    assert remote.tokenizer is not None
    only = models["template-only"]
    assert only.template is not None and only.template.render([{"role": "user", "content": "y"}]) == "[y]"
    assert bare.template is None and bare.tokenizer is None
    assert "acme/absent" not in caplog.text  # the override replaced it: no warning about model.json


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_unresolved_tokenizer_is_logged_once(
    tmp_path: Path, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    repository = tmp_path / "repo"
    _model_json(repository, "m", {"model": "facebook/opt-125m"})
    catalog = ModelCatalog(_Backend("m"), [repository], sources=ModelFileSources(hub_cache=tmp_path / "empty"))  # type: ignore[arg-type]
    await catalog.refresh()
    await catalog.refresh()
    warnings = [r.getMessage() for r in caplog.records if "facebook/opt-125m" in r.getMessage()]
    assert len(warnings) == 1 and str(tmp_path / "empty") in warnings[0] and "GATEWAY_MODEL_FILES" in warnings[0]


def test_model_files_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("x")
    monkeypatch.setenv("GATEWAY_MODEL_FILES", json.dumps({"m": {"chat_template": str(template), "max_model_len": 7}}))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    settings = Settings()
    assert settings.model_files == {"m": ModelFiles(chat_template=template, max_model_len=7)}
    assert settings.hf_hub_cache == tmp_path / "hf" / "hub"
    monkeypatch.setenv("GATEWAY_HF_HUB_CACHE", "/elsewhere")
    assert Settings().hf_hub_cache == Path("/elsewhere")


def test_model_files_refuses_a_missing_template_and_unknown_keys(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a readable file"):
        Settings(model_files={"m": {"chat_template": str(tmp_path / "missing.jinja")}})
    with pytest.raises(ValueError):
        Settings(model_files={"m": {"template": "x"}})


def _fake_stub_python(where: Path, output: str) -> Path:
    where.mkdir()
    script = where / "python3"
    script.write_text(f"#!/bin/sh\nprintf '%s' '{output}'\n")
    script.chmod(0o755)
    return where


def test_stubs_with_numpy_2_are_refused_at_launch(tmp_path: Path) -> None:
    with pytest.raises(TritonLaunchError, match=r"numpy 2\.1\.3 \(/venv/numpy/__init__.py\).*pip install 'numpy<2'"):
        check_stub_numpy(_fake_stub_python(tmp_path / "np2", "2.1.3 /venv/numpy/__init__.py"))
    check_stub_numpy(_fake_stub_python(tmp_path / "np1", "1.26.4 /venv/numpy/__init__.py"))


def test_auto_complete_is_on_by_default_and_has_a_no_flag() -> None:
    from gateway.cli import settings_from_args

    assert settings_from_args([]).triton_auto_complete_config is True
    assert settings_from_args(["--no-triton-auto-complete-config"]).triton_auto_complete_config is False
    assert settings_from_args(["--triton-working-dir", "/srv/triton"]).triton_working_dir == Path("/srv/triton")


@pytest.mark.parametrize(
    ("engine_extra", "weights_config", "vision"),
    [
        ({}, {"architectures": ["LlamaForCausalLM"]}, False),  # a text model: its config has no vision tower
        ({}, {"architectures": ["LlavaForConditionalGeneration"], "vision_config": {}}, True),
        ({"limit_mm_per_prompt": {"image": 4}}, {"architectures": ["LlamaForCausalLM"]}, True),
        ({"limit_mm_per_prompt": {"image": 0}}, {"vision_config": {}}, False),  # images turned off for vLLM
    ],
)
def test_vision_is_what_model_json_tells_vllm(
    tmp_path: Path, engine_extra: dict[str, object], weights_config: dict[str, object], vision: bool
) -> None:
    """Triton's vLLM backend declares an ``image`` input on every model, so whether the model can
    see is read where vLLM reads it: ``limit_mm_per_prompt``, else the weights' config."""
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text(json.dumps(weights_config))
    repository = tmp_path / "repo"
    _model_json(repository, "m", {"model": str(weights), **engine_extra})
    assert read_local_model_files(repository, "m").vision is vision


def test_vision_is_unknown_without_the_weights(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    _model_json(repository, "m", {"model": "org/not-in-any-cache"})
    assert read_local_model_files(repository, "m").vision is None
