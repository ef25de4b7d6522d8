"""The chart serving TensorRT-LLM: NGC's TensorRT-LLM image, each layout's ``gateway.modelFiles``
entry reaching the gateway as it parses it, and the one thing the token route needs from the
chart: the gateway reads every path the model configs name (``tokenizer_dir``, LoRA directories)
at the path Triton reads it. The generic checks (lint, Kubernetes schemas, probes, security) run
on the same scenarios in test_chart.py."""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.deploy.values import (
    TOKENIZER,
    TRTLLM,
    TRTLLM_IMAGE_TAG,
    TRTLLM_MODEL_FILES,
    TRTLLM_SCENARIOS,
    merge_values,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
FULLNAME = "llm-triton-openai-gateway"
TRITON_NAME = "llm-triton-openai-gateway-triton"
Rendered = Any  # conftest.Rendered
RenderFn = Callable[[dict[str, Any]], Rendered]

# NVIDIA's TensorRT-LLM quick starts run the container with --shm-size=2g.
NVIDIA_SHM_BYTES = 2 * 1024**3
MANAGED = sorted(name for name, values in TRTLLM_SCENARIOS.items() if "mode" not in values["triton"])


@pytest.fixture(scope="module")
def rendered(render: RenderFn) -> dict[str, Rendered]:
    return {name: render(values) for name, values in TRTLLM_SCENARIOS.items()}


def _pod(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]


def _container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in _pod(deployment)["containers"] if c["name"] == name]
    return found


def _triton(r: Rendered) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pod spec, the container) that run Triton: its Deployment's, or the sidecar pod's."""
    deployments = {d["metadata"]["name"]: d for d in r.all("Deployment")}
    deployment = deployments.get(TRITON_NAME, deployments[FULLNAME])
    return _pod(deployment), _container(deployment, "triton")


def _models_mount(container: dict[str, Any]) -> dict[str, Any]:
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "models"]
    return mount


def _settings(r: Rendered) -> dict[str, str]:
    return r.one("ConfigMap", FULLNAME)["data"]


def _quantity_bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([KMGT]i)?", quantity).groups()  # type: ignore[union-attr]
    return int(number) * 1024 ** ("KMGT".index(unit[0]) + 1 if unit else 0)


# ---------------------------------------------------------------------------------------------
# each layout


@pytest.mark.parametrize("scenario", sorted(TRTLLM_SCENARIOS))
def test_model_files_reach_the_gateway_as_it_parses_them(
    rendered: dict[str, Rendered], monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    from gateway.config import Settings

    given = TRTLLM_SCENARIOS[scenario]["gateway"]["modelFiles"]
    monkeypatch.setenv("GATEWAY_MODEL_FILES", _settings(rendered[scenario])["GATEWAY_MODEL_FILES"])
    parsed = Settings().model_files
    assert sorted(parsed) == sorted(given)
    for model, fields in given.items():
        assert parsed[model].model_dump(include=set(fields)) == fields


@pytest.mark.parametrize("scenario", MANAGED + ["trtllm-sidecar"])
def test_triton_runs_the_tensorrt_llm_image_on_a_gpu_with_a_memory_backed_shm(
    rendered: dict[str, Rendered], scenario: str
) -> None:
    pod, triton = _triton(rendered[scenario])
    assert triton["image"] == f"nvcr.io/nvidia/tritonserver:{TRTLLM_IMAGE_TAG}"
    assert triton["image"].endswith("-trtllm-python-py3")
    assert triton["command"] == ["tritonserver"]
    assert triton["resources"]["limits"]["nvidia.com/gpu"] >= 1
    assert "--disable-auto-complete-config" not in triton["args"]  # the LLM-API model needs it
    (shm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"]["medium"] == "Memory"
    assert _quantity_bytes(shm["emptyDir"]["sizeLimit"]) >= NVIDIA_SHM_BYTES
    assert {"name": "dshm", "mountPath": "/dev/shm"} in triton["volumeMounts"]


@pytest.mark.parametrize("scenario", sorted(TRTLLM_SCENARIOS))
def test_the_gateway_reads_each_config_path_where_triton_reads_it(rendered: dict[str, Rendered], scenario: str) -> None:
    """A tokenizer_dir in a TensorRT-LLM config is a path in Triton's pod; the token route reads
    the same path in the gateway's, so both mount one volume at one mountPath."""
    r = rendered[scenario]
    values = TRTLLM_SCENARIOS[scenario]
    gateway_pod = _pod(r.one("Deployment", FULLNAME))
    gateway_mount = _models_mount(_container(r.one("Deployment", FULLNAME), "gateway"))
    assert gateway_mount["readOnly"] is True
    (gateway_volume,) = [v for v in gateway_pod["volumes"] if v["name"] == "models"]
    if values["triton"].get("mode") == "external":
        mine = values["gateway"]["modelRepository"]
        assert gateway_volume["persistentVolumeClaim"] == {"claimName": mine["existingClaim"], "readOnly": True}
        assert gateway_mount["mountPath"] == mine["mountPath"]  # the path the external Triton sees
        root = PurePosixPath(mine["mountPath"])
    else:
        triton_pod, triton = _triton(r)
        triton_mount = _models_mount(triton)
        (triton_volume,) = [v for v in triton_pod["volumes"] if v["name"] == "models"]
        assert gateway_mount["mountPath"] == triton_mount["mountPath"]
        assert gateway_mount.get("subPath") == triton_mount.get("subPath")
        assert (
            gateway_volume["persistentVolumeClaim"]["claimName"] == triton_volume["persistentVolumeClaim"]["claimName"]
        )
        root = PurePosixPath(triton_mount["mountPath"])
    repository = PurePosixPath(_settings(r)["GATEWAY_MODEL_REPOSITORY"])  # where multi_lora.json is read
    assert root in repository.parents
    for fields in values["gateway"]["modelFiles"].values():
        if "tokenizer" in fields:
            assert root in PurePosixPath(fields["tokenizer"]).parents
    assert root in PurePosixPath(TOKENIZER).parents  # where the configs' tokenizer_dir points


def test_notes_show_how_each_model_is_driven(rendered: dict[str, Rendered], render: RenderFn) -> None:
    notes = rendered["trtllm-ensemble"].notes
    assert "TensorRT-LLM" in notes and 'm["triton"]' in notes
    assert "tokenizer_dir its preprocessing config names lies under /models" in notes
    assert "TensorRT-LLM" not in render({}).notes
    unmounted = render(merge_values(TRTLLM, {"gateway": {"modelRepository": {"enabled": False}}})).notes
    assert "mounts no model volume" in unmounted and "per-response text" in unmounted


# ---------------------------------------------------------------------------------------------
# what fails early


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"gateway": {"modelFiles": {"ensemble": {"chat_template": "/etc/gateway/chat.jinja"}}}},
            r"modelFiles\.ensemble\.chat_template \(/etc/gateway/chat\.jinja\) must lie under the model volume's mountPath \(/models\)",
        ),
        (
            {"gateway": {"modelFiles": {"tensorrt_llm": {"layout": "tensorrt_llm", "tokenizer": "/weights/tok"}}}},
            r"modelFiles\.tensorrt_llm\.tokenizer \(/weights/tok\) must lie under",
        ),
        (
            {"gateway": {"modelFiles": {"ensemble": {"tokenizer": "/models/../etc/tok"}}}},
            r"must lie under the model volume's mountPath",
        ),
        (
            {
                "gateway": {
                    "modelRepository": {"enabled": False},
                    "modelFiles": {"ensemble": {"trtllm_route": "tokens"}},
                }
            },
            r"modelFiles\.ensemble: trtllm_route tokens sends token ids.*set gateway\.modelRepository\.enabled=true",
        ),
        (
            {
                "triton": {"mode": "external", "external": {"url": "triton:8001"}},
                "gateway": {"modelFiles": {"tensorrt_llm": {"layout": "tensorrt_llm"}}},
            },
            r"layout tensorrt_llm sends token ids.*set gateway\.modelRepository\.existingClaim",
        ),
        (
            {
                "triton": {"mode": "external", "external": {"url": "triton:8001"}},
                "gateway": {"modelFiles": {"llama": {"tokenizer": "/models/weights/llama"}}},
            },
            r"modelFiles\.llama\.tokenizer \(/models/weights/llama\) is a file the gateway reads, and the gateway mounts no model volume",
        ),
    ],
    ids=["template-off-volume", "tokenizer-off-volume", "dot-dot", "tokens-unmounted", "tokens-external", "external"],
)
def test_model_files_the_gateway_cannot_read_fail_at_render(
    render: RenderFn, helm: ModuleType, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmRenderError, match=message):
        render(merge_values(TRTLLM, values))


def test_files_on_the_volume_and_hub_ids_render(render: RenderFn) -> None:
    files = {
        "ensemble": {"chat_template": "/models/templates/llama3.jinja", "tokenizer": TOKENIZER},
        "llmapi": {"layout": "llmapi", "tokenizer": "meta-llama/Llama-3.1-8B-Instruct"},  # a hub id
    }
    r = render(merge_values(TRTLLM, {"gateway": {"modelFiles": files}}))
    assert json.loads(_settings(r)["GATEWAY_MODEL_FILES"]) == files
    assert "GATEWAY_MODEL_FILES" not in _settings(render({}))


# ---------------------------------------------------------------------------------------------
# the schema follows the gateway's ModelFiles


def _choices(annotation: Any) -> set[Any]:
    """The values a ``Literal`` (optionally ``| None``) allows."""
    if typing.get_origin(annotation) is typing.Literal:
        return set(typing.get_args(annotation))
    if annotation is type(None):
        return {None}
    return {value for arg in typing.get_args(annotation) for value in _choices(arg)}


def test_the_schema_describes_every_model_files_field_with_the_gateways_choices(chart: Any) -> None:
    from gateway.backend.contracts import LAYOUTS
    from gateway.config import ModelFiles
    from gateway.reasoning.registry import REASONING_PARSERS
    from gateway.tools.registry import PARSERS

    entry = chart.schema["properties"]["gateway"]["properties"]["modelFiles"]["additionalProperties"]
    properties = entry["properties"]
    assert entry["additionalProperties"] is False  # ModelFiles forbids unknown keys
    assert sorted(properties) == sorted(ModelFiles.model_fields)
    fields = ModelFiles.model_fields
    for name in ("layout", "trtllm_route", "runner", "chat_template_content_format"):
        assert set(properties[name]["enum"]) == _choices(fields[name].annotation), name
    assert set(properties["layout"]["enum"]) == {*LAYOUTS, None}
    parsers = {n for n, spec in PARSERS.items() if not spec.forced}
    assert set(properties["tool_call_parser"]["enum"]) == {*parsers, None}
    assert set(properties["reasoning_parser"]["enum"]) == {*REASONING_PARSERS, "", None}


@pytest.mark.parametrize(
    "bad",
    [
        {"modelFiles": {"ensemble": {"layout": "trtllm"}}},
        {"modelFiles": {"ensemble": {"trtllm_route": "always"}}},
        {"modelFiles": {"ensemble": {"max_model_len": 0}}},
        {"modelFiles": {"ensemble": {"chat_template": "chat.jinja"}}},  # relative to nothing in the pod
        {"modelFiles": {"ensemble": {"tool_call_parser": "llama3"}}},
        {"modelFiles": {"ensemble": {"tokenizer_dir": "/models/weights/tok"}}},  # Triton's name, not ours
        {"modelFiles": {"ensemble": None}},
        {"extraSettings": {"model_files": {"ensemble": {"max_model_len": 8192}}}},
    ],
)
def test_bad_model_files_are_refused_by_the_schema(chart: Any, helm: ModuleType, bad: dict[str, Any]) -> None:
    chart.validate_schema({"gateway": {"modelFiles": TRTLLM_MODEL_FILES["bls"]}})
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"gateway": bad})


# ---------------------------------------------------------------------------------------------
# the documented values


def _deploy_doc_values() -> dict[str, Any]:
    """The values block of docs/DEPLOY.md's "TensorRT-LLM" section."""
    text = (REPO_ROOT / "docs" / "DEPLOY.md").read_text()
    section = text.split("\n## TensorRT-LLM\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "one values block in the TensorRT-LLM section"
    loaded: dict[str, Any] = yaml.safe_load(blocks[0])
    return loaded


def test_the_values_docs_deploy_shows_render_as_it_says(render: RenderFn, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.config import Settings

    values = _deploy_doc_values()
    r = render(values)
    pod, triton = _triton(r)
    assert triton["image"].endswith(values["triton"]["image"]["tag"])
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert triton["resources"]["requests"]["nvidia.com/gpu"] == 1  # the chart's requests are kept
    assert pod["imagePullSecrets"] == [{"name": "ngc"}]
    monkeypatch.setenv("GATEWAY_MODEL_FILES", _settings(r)["GATEWAY_MODEL_FILES"])
    ensemble = Settings().model_files["ensemble"]
    assert ensemble.trtllm_route == "tokens" and ensemble.max_model_len == 8192
    assert _models_mount(_container(r.one("Deployment", FULLNAME), "gateway"))["mountPath"] == "/models"
