"""How a TensorRT-LLM model is served (``models/trtllm.py``): its layout and contract, the token
route through an ensemble's or BLS's ``tensorrt_llm`` step where the gateway can read the
tokenizer the preprocessing step names, whether its streamed text is exact, and its LoRA task ids.
Interfaces are read from real ``ModelConfig`` messages (``trtllm_configs``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gateway.backend.contracts.trtllm_llmapi import LlmApiContract
from gateway.backend.contracts.trtllm_text import TextContract
from gateway.backend.contracts.trtllm_tokens import TokensContract
from gateway.backend.contracts.vllm import VLLM
from gateway.backend.types import GenerationRequest, ModelInterface, TensorSpec
from gateway.config import ModelFiles
from gateway.models.files import ModelFileSources, load_tokenizer
from gateway.models.trtllm import ServedLayout, describe_layout
from tests.unit import trtllm_configs as cfg

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "triton_models" / "weights" / "tiny-llm" / "tokenizer.json"
SOURCES = ModelFileSources()


def tokenizer_dir(tmp_path: Path, **config: Any) -> Path:
    """A folder with tiny-llm's tokenizer.json and a tokenizer_config.json of ``config``."""
    folder = tmp_path / "tokenizer"
    folder.mkdir(exist_ok=True)
    shutil.copy(TINY, folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def describe(
    name: str,
    models: dict[str, ModelInterface],
    override: ModelFiles | None = None,
    adapter_dirs: tuple[tuple[str, Path | None], ...] = (),
) -> ServedLayout:
    return describe_layout(name, models.get(name), models, override, SOURCES, adapter_dirs, load_tokenizer)


def stack(folder: Path, *, decoupled: bool = True, **configs: Any) -> dict[str, ModelInterface]:
    return cfg.interfaces(cfg.stack(str(folder), decoupled=decoupled) | configs)


def test_an_ensemble_whose_step_and_tokenizer_are_here_is_driven_with_tokens(tmp_path: Path) -> None:
    folder = tokenizer_dir(tmp_path, eos_token="<|im_end|>", pad_token="<pad>")
    models = stack(folder)
    served = describe("ensemble", models)
    assert served.layout == "ensemble"
    assert isinstance(served.contract, TextContract) and served.contract.interface is models["ensemble"]
    assert served.tokenizer_dir == folder
    route = served.route
    assert route is not None
    assert route.step == "tensorrt_llm"
    assert isinstance(route.contract, TokensContract) and route.contract.interface is models["tensorrt_llm"]
    assert (route.end_id, route.pad_id) == (4, 0)  # <|im_end|>, <pad> in tiny-llm's vocabulary
    assert (route.add_special_tokens, route.skip_special_tokens) == (True, True)  # the steps' defaults
    assert served.text_exact is True


def test_the_pad_id_is_the_end_id_when_the_tokenizer_has_no_pad_token(tmp_path: Path) -> None:
    folder = tokenizer_dir(tmp_path, eos_token={"content": "</s>", "special": True})
    route = describe("ensemble", stack(folder)).route
    assert route is not None and (route.end_id, route.pad_id) == (2, 2)


def test_a_tokenizer_without_an_eos_token_gives_no_route(tmp_path: Path) -> None:
    folder = tokenizer_dir(tmp_path, bos_token="<s>")
    served = describe("ensemble", stack(folder))
    assert served.route is None
    assert served.text_exact is False, "decoupled, and read through its own per-response text"


def test_the_steps_parameters_say_how_the_prompt_is_tokenized_and_decoded(tmp_path: Path) -> None:
    folder = tokenizer_dir(tmp_path, eos_token="<|im_end|>")
    models = stack(
        folder,
        preprocessing=cfg.parse(cfg.preprocessing(str(folder), add_special_tokens="false")),
        postprocessing=cfg.parse(cfg.postprocessing(str(folder), skip_special_tokens="False")),
    )
    route = describe("ensemble", models).route
    assert route is not None and (route.add_special_tokens, route.skip_special_tokens) == (False, False)
    placeholder = stack(
        folder, preprocessing=cfg.parse(cfg.preprocessing(str(folder), add_special_tokens="${add_special_tokens}"))
    )
    route = describe("ensemble", placeholder).route
    assert route is not None and route.add_special_tokens is True, "an unfilled template value is the default"


@pytest.mark.parametrize(("decoupled", "exact"), [(True, False), (False, True)])
def test_trtllm_route_model_keeps_the_models_own_text(tmp_path: Path, decoupled: bool, exact: bool) -> None:
    folder = tokenizer_dir(tmp_path, eos_token="<|im_end|>")
    models = stack(folder, decoupled=decoupled)
    served = describe("ensemble", models, ModelFiles(trtllm_route="model"))
    assert served.route is None
    assert isinstance(served.contract, TextContract) and served.contract.interface is models["ensemble"]
    assert served.tokenizer_dir == folder, "the tokenizer still counts and templates"
    assert served.text_exact is exact, "only a decoupled model streams text decoded per response"


def test_an_ensemble_whose_step_is_not_served_here_reads_its_own_text(tmp_path: Path) -> None:
    folder = tokenizer_dir(tmp_path, eos_token="<|im_end|>")
    models = stack(folder)
    del models["tensorrt_llm"]
    served = describe("ensemble", models)
    assert served.route is None and served.layout == "ensemble"
    assert served.text_exact is False


@pytest.mark.parametrize(("accumulate", "exact"), [("true", True), ("false", False)])
def test_a_bls_model_streams_exact_text_when_it_accumulates_tokens(
    tmp_path: Path, accumulate: str, exact: bool
) -> None:
    folder = tokenizer_dir(tmp_path, eos_token="<|im_end|>")
    models = stack(folder, tensorrt_llm_bls=cfg.parse(cfg.bls(decoupled=True, accumulate_tokens=accumulate)))
    own = describe("tensorrt_llm_bls", models, ModelFiles(trtllm_route="model"))
    assert own.layout == "bls" and own.route is None
    assert own.text_exact is exact
    routed = describe("tensorrt_llm_bls", models)
    assert routed.route is not None and routed.route.step == "tensorrt_llm"
    assert routed.text_exact is True


def test_a_tensorrt_llm_model_with_a_tokenizer_routes_to_itself(tmp_path: Path) -> None:
    folder = tokenizer_dir(tmp_path, eos_token="<|im_end|>")
    config = cfg.parse(cfg.tensorrt_llm(decoupled=True, parameters={"tokenizer_dir": str(folder)}))
    models = cfg.interfaces({"llama": config})
    served = describe("llama", models)
    assert served.layout == "tensorrt_llm" and isinstance(served.contract, TokensContract)
    assert served.route is not None and served.route.step == "llama" and served.route.contract is served.contract
    assert served.tokenizer_dir == folder


def test_a_tensorrt_llm_model_without_a_tokenizer_has_no_route() -> None:
    models = cfg.interfaces({"llama": cfg.parse(cfg.tensorrt_llm(decoupled=True))})
    served = describe("llama", models)
    assert served.layout == "tensorrt_llm" and served.route is None and served.tokenizer_dir is None


def test_the_llmapi_model_is_exact_and_takes_no_route() -> None:
    served = describe("llm", cfg.interfaces({"llm": cfg.parse(cfg.llmapi(decoupled=True))}))
    assert served.layout == "llmapi" and isinstance(served.contract, LlmApiContract)
    assert served.route is None and served.text_exact is True


def test_vllm_and_unknown_models_get_the_vllm_contract() -> None:
    vllm = ModelInterface(
        {
            "text_input": TensorSpec("text_input", "BYTES", (1,)),
            "sampling_parameters": TensorSpec("sampling_parameters", "BYTES", (1,)),
        }
    )
    assert describe("v", {"v": vllm}) == ServedLayout("vllm", VLLM)
    assert describe("missing", {}) == ServedLayout(None, VLLM)
    assert describe("pre", stack(Path("/nowhere")), None).layout is None  # preprocessing: no generating layout


def test_model_files_layout_overrides_the_detection(tmp_path: Path) -> None:
    folder = tokenizer_dir(tmp_path, eos_token="<|im_end|>")
    served = describe("ensemble", stack(folder), ModelFiles(layout="bls", trtllm_route="model"))
    assert served.layout == "bls" and isinstance(served.contract, TextContract)
    assert served.contract.layout == "bls"


def _lora(request_for: str) -> GenerationRequest:
    return GenerationRequest("r", "ensemble", "hi", {"max_tokens": 4, "lora_name": request_for})


def test_adapters_get_task_ids_in_multi_lora_order(tmp_path: Path) -> None:
    folder = tokenizer_dir(tmp_path, eos_token="<|im_end|>")
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    dirs = (("zeta", first), ("lost", None), ("alpha", second))  # file order, not sorted
    served = describe("ensemble", stack(folder), adapter_dirs=dirs)
    assert served.route is not None
    for contract in (served.contract, served.route.contract):
        assert contract.uses_lora_task(_lora("zeta")) == 1
        assert contract.uses_lora_task(_lora("alpha")) == 3, "numbered as Triton's frontend numbers the file"
        assert contract.uses_lora_task(_lora("lost")) is None, "no folder here: no weights to send"


def test_the_engines_config_gives_the_context_length_and_the_kv_block_size(tmp_path: Path) -> None:
    from gateway.backend.types import ModelInterface
    from gateway.models.trtllm import engine_block_tokens, engine_build

    (tmp_path / "config.json").write_text(
        json.dumps({"build_config": {"max_seq_len": 8192, "plugin_config": {"tokens_per_block": 32}}})
    )
    build = engine_build(ModelInterface(parameters={"gpt_model_path": str(tmp_path)}))
    assert build["max_seq_len"] == 8192 and engine_block_tokens(build) == 32
    assert engine_build(ModelInterface(parameters={"gpt_model_path": "${engine_dir}"})) == {}
    assert engine_build(ModelInterface(parameters={"gpt_model_path": str(tmp_path / "missing")})) == {}
    (tmp_path / "config.json").write_text("{not json")
    assert engine_block_tokens(engine_build(ModelInterface(parameters={"gpt_model_path": str(tmp_path)}))) is None
