"""The stand-in repository (tests/triton_models_trtllm) declares the interfaces of the contract, and
tests/integration/trtllm_stack.py fills it. Configs are parsed with Triton's own protobuf schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.integration.trtllm_stack import MODELS, REPOSITORY, fill_repository

DataType = model_config_pb2.DataType


def load(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())


def declared(config: model_config_pb2.ModelConfig, kind: str) -> dict[str, tuple[str, list[int], bool]]:
    return {
        entry.name: (
            DataType.Name(entry.data_type).removeprefix("TYPE_"),
            list(entry.dims),
            getattr(entry, "optional", False),
        )
        for entry in getattr(config, kind)
    }


@pytest.fixture(scope="module")
def configs() -> dict[str, model_config_pb2.ModelConfig]:
    return {model: load(REPOSITORY / model / "config.pbtxt") for model in MODELS}


def test_every_model_is_there_with_one_cpu_instance(configs: dict[str, model_config_pb2.ModelConfig]) -> None:
    assert sorted(p.name for p in REPOSITORY.iterdir() if p.is_dir()) == sorted(MODELS)
    for name, config in configs.items():
        if config.platform != "ensemble":
            assert config.backend == "python" and [(g.count, g.kind) for g in config.instance_group] == [
                (1, model_config_pb2.ModelInstanceGroup.KIND_CPU)
            ], name
        assert (REPOSITORY / name / "1").is_dir()


@pytest.mark.parametrize(
    ("model", "decoupled", "max_batch_size"),
    [
        ("tensorrt_llm", True, 64),
        ("tensorrt_llm_nd", False, 64),
        ("preprocessing", False, 64),
        ("postprocessing", False, 64),
        ("tensorrt_llm_bls", True, 64),
        ("tensorrt_llm_bls_acc", True, 64),
        ("llmapi", True, 0),
        ("ensemble_v05", True, 128),
    ],
)
def test_transaction_modes_and_batch_sizes(
    configs: dict[str, model_config_pb2.ModelConfig], model: str, decoupled: bool, max_batch_size: int
) -> None:
    config = configs[model]
    assert config.model_transaction_policy.decoupled is decoupled and config.max_batch_size == max_batch_size


def test_tensorrt_llm_requires_only_the_lengths_and_reshapes_scalars(
    configs: dict[str, model_config_pb2.ModelConfig],
) -> None:
    inputs = {entry.name: entry for entry in configs["tensorrt_llm"].input}
    assert {name for name, entry in inputs.items() if not entry.optional} == {"input_lengths", "request_output_len"}
    assert inputs["input_ids"].allow_ragged_batch and list(inputs["stop_words_list"].dims) == [2, -1]
    assert list(inputs["streaming"].reshape.shape) == [] and inputs["streaming"].HasField("reshape")
    assert DataType.Name(inputs["seed"].data_type) == "TYPE_UINT64" and list(inputs["lora_config"].dims) == [-1, 3]
    assert declared(configs["tensorrt_llm"], "output") == declared(configs["tensorrt_llm_nd"], "output")
    outputs = declared(configs["tensorrt_llm"], "output")
    assert outputs["output_ids"][:2] == ("INT32", [-1, -1]) and outputs["num_output_tokens"][:2] == ("INT32", [1])


def test_the_ensemble_declares_the_contracts_tensors_and_the_duplicate_output(
    configs: dict[str, model_config_pb2.ModelConfig],
) -> None:
    ensemble = configs["ensemble"]
    names = [entry.name for entry in ensemble.output]
    assert names.count("kv_cache_alloc_total_blocks") == 2
    inputs = declared(ensemble, "input")
    assert inputs["text_input"] == ("STRING", [1], False) and inputs["max_tokens"] == ("INT32", [1], False)
    assert inputs["seed"] == ("UINT64", [1], True) and inputs["stop_words"] == ("STRING", [-1], True)
    assert [step.model_name for step in ensemble.ensemble_scheduling.step] == [
        "preprocessing",
        "tensorrt_llm",
        "postprocessing",
    ]
    assert [step.model_name for step in configs["ensemble_nd"].ensemble_scheduling.step][1] == "tensorrt_llm_nd"


def test_the_ensemble_steps_only_use_declared_tensors(configs: dict[str, model_config_pb2.ModelConfig]) -> None:
    ensemble = configs["ensemble"]
    available = {entry.name for entry in ensemble.input}
    for step in ensemble.ensemble_scheduling.step:
        step_config = configs[step.model_name]
        assert set(step.input_map) <= {entry.name for entry in step_config.input}
        assert set(step.output_map) <= {entry.name for entry in step_config.output}
        assert set(step.input_map.values()) <= available, step.model_name
        available |= set(step.output_map.values())
    assert {entry.name for entry in ensemble.output} <= available


def test_the_bls_declares_the_ensembles_interface_once_plus_its_own_inputs(
    configs: dict[str, model_config_pb2.ModelConfig],
) -> None:
    ensemble, bls = configs["ensemble"], configs["tensorrt_llm_bls"]
    assert set(declared(ensemble, "input")) < set(declared(bls, "input"))
    assert set(declared(bls, "input")) - set(declared(ensemble, "input")) == {
        "image_input",
        "image_bytes_input",
        "image_url_input",
        "video_bytes_input",
        "num_draft_tokens",
        "use_draft_logits",
    }
    assert [entry.name for entry in bls.output].count("kv_cache_alloc_total_blocks") == 1
    assert bls.parameters["accumulate_tokens"].string_value == "false"
    assert configs["tensorrt_llm_bls_acc"].parameters["accumulate_tokens"].string_value == "true"


def test_llmapi_and_the_v05_ensemble_declare_their_releases_types(
    configs: dict[str, model_config_pb2.ModelConfig],
) -> None:
    llmapi = declared(configs["llmapi"], "input")
    assert (
        llmapi["streaming"] == ("BOOL", [1], True)
        and "stream" not in llmapi
        and llmapi["text_input"][:2] == ("STRING", [-1])
    )
    assert declared(configs["llmapi"], "output")["cumulative_logprob"][:2] == ("FP32", [-1])
    v05 = declared(configs["ensemble_v05"], "input")
    assert {
        name: v05[name][0] for name in ("max_tokens", "end_id", "pad_id", "top_k", "min_length", "beam_width")
    } == dict.fromkeys(("max_tokens", "end_id", "pad_id", "top_k", "min_length", "beam_width"), "UINT32")
    assert v05["random_seed"][0] == "UINT64" and not v05["bad_words"][2] and not v05["stop_words"][2]
    assert "exclude_input_in_output" not in v05 and declared(configs["ensemble_v05"], "output") == {
        "text_output": ("STRING", [-1, -1], False)
    }


def test_filling_leaves_no_placeholder_and_writes_multi_lora_json(tmp_path: Path) -> None:
    filled = fill_repository(tmp_path / "repo")
    for config in filled.glob("*/config.pbtxt"):
        text = config.read_text(encoding="utf-8")
        assert not re.search(r"\$\{\w+\}", text), config
        load(config)
    parameters = load(filled / "tensorrt_llm" / "config.pbtxt").parameters
    assert Path(parameters["tokenizer_dir"].string_value, "tokenizer.json").is_file()
    assert Path(parameters["gpt_model_path"].string_value, "model.safetensors").is_file()
    for model in ("ensemble", "ensemble_nd", "tensorrt_llm", "tensorrt_llm_bls", "tensorrt_llm_bls_acc"):
        adapters = json.loads((filled / model / "1" / "multi_lora.json").read_text())
        assert list(adapters) == ["alpha", "beta"]
        assert all(Path(path, "model.lora_weights.npy").is_file() for path in adapters.values())
    assert not (filled / "README.md").exists()
