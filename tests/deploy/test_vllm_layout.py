"""triton_models/vllm: the production model repository for Triton's vLLM backend, checked
against Triton's own config schema, the backend's contract and the chart's volume layout."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from gateway.config import Settings
from gateway.models.files import read_local_model_files

REPO_ROOT = Path(__file__).resolve().parents[2]
LAYOUT = REPO_ROOT / "triton_models" / "vllm"
CHART_VALUES = yaml.safe_load((REPO_ROOT / "deploy/helm/triton-openai-gateway/values.yaml").read_text())
MOUNT = PurePosixPath(CHART_VALUES["triton"]["modelRepository"]["mountPath"])
REPOSITORY = PurePosixPath(CHART_VALUES["triton"]["modelRepository"]["path"])
MODELS = sorted(p for p in (LAYOUT / REPOSITORY.name).iterdir() if p.is_dir())


def test_layout_directory_is_what_the_chart_points_triton_at() -> None:
    assert REPOSITORY.parent == MOUNT
    assert MODELS, f"no model in {LAYOUT / REPOSITORY.name}"
    assert sorted(p.name for p in LAYOUT.iterdir()) == ["README.md", REPOSITORY.name]


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_config_pbtxt_is_a_vllm_model_with_custom_metrics(model: Path) -> None:
    config = text_format.Parse((model / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert config.backend == "vllm"
    assert config.name in ("", model.name)
    assert [group.kind for group in config.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_MODEL]
    assert config.parameters["REPORT_CUSTOM_METRICS"].string_value == "true"
    assert config.max_batch_size == 0  # the backend forces 0 (no batch dimension)


def _on_volume(path: str) -> PurePosixPath:
    posix = PurePosixPath(path)
    assert posix.is_absolute(), f"{path}: vLLM resolves relative paths against its cwd; use absolute ones"
    assert MOUNT in posix.parents, f"{path} is not on the model volume ({MOUNT})"
    assert REPOSITORY not in posix.parents, f"{path} lies inside the repository; Triton would try to load it"
    return posix


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_model_json_points_at_weights_on_the_volume_and_reports_stats(model: Path) -> None:
    engine = json.loads((model / "1" / "model.json").read_text())
    _on_volume(engine["model"])
    if "tokenizer" in engine:
        _on_volume(engine["tokenizer"])
    assert engine.get("disable_log_stats", False) is False, "vllm:* metrics need disable_log_stats false"
    assert 0 < engine["gpu_memory_utilization"] <= 0.95
    assert isinstance(engine["max_model_len"], int)


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_lora_adapters_are_listed_and_reachable_by_the_gateway(model: Path) -> None:
    engine = json.loads((model / "1" / "model.json").read_text())
    separator = Settings().lora_separator
    assert separator not in model.name
    loras_file = model / "1" / "multi_lora.json"
    if not engine.get("enable_lora"):
        assert not loras_file.exists()
        return
    loras = json.loads(loras_file.read_text())
    assert loras and isinstance(loras, dict)
    for name, path in loras.items():
        assert name and separator not in name
        _on_volume(path)
    found = read_local_model_files(LAYOUT / REPOSITORY.name, model.name)
    assert found.adapters == tuple(sorted(loras))
    assert found.max_model_len == engine["max_model_len"]
