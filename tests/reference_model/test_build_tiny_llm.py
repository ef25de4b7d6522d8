"""build_tiny_llm.py is deterministic and the committed weights are what it builds."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from .conftest import REPO_ROOT

WEIGHTS = REPO_ROOT / "triton_models" / "weights"
EXACT_FILES = [
    "tiny-llm/tokenizer.json",
    "tiny-llm/tokenizer_config.json",
    "tiny-llm/chat_template.jinja",
    "tiny-llm/config.json",
    "tiny-llm/generation_config.json",
    "lora/alpha/adapter_config.json",
    "lora/beta/adapter_config.json",
]
TENSOR_FILES = [
    "tiny-llm/model.safetensors",
    "lora/alpha/adapter_model.safetensors",
    "lora/beta/adapter_model.safetensors",
]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = REPO_ROOT / "triton_models" / "build_tiny_llm.py"
    spec = importlib.util.spec_from_file_location("build_tiny_llm", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("weights")
    module.build(out)
    return out


VERSION_STAMP = re.compile(rb'("transformers_version": )"[^"]*"')
"""What ``save_pretrained`` writes into config.json and generation_config.json: the version of
transformers installed when it ran, which moves whenever PyPI's does, while the model does not."""


@pytest.mark.parametrize("relative", EXACT_FILES)
def test_rebuild_gives_identical_files(rebuilt: Path, relative: str) -> None:
    """Byte for byte, but for the value of the version stamp."""
    fresh, committed = ((path / relative).read_bytes() for path in (rebuilt, WEIGHTS))
    assert VERSION_STAMP.sub(rb'\1"*"', fresh) == VERSION_STAMP.sub(rb'\1"*"', committed)


@pytest.mark.parametrize("relative", TENSOR_FILES)
def test_rebuild_gives_identical_tensors(rebuilt: Path, relative: str) -> None:
    fresh, committed = load_file(rebuilt / relative), load_file(WEIGHTS / relative)
    assert fresh.keys() == committed.keys()
    assert all(torch.equal(fresh[name], committed[name]) for name in fresh)


def test_chat_template_is_in_both_places_and_renders_chatml() -> None:
    from transformers import AutoTokenizer

    model_dir = WEIGHTS / "tiny-llm"
    template = (model_dir / "chat_template.jinja").read_text()
    assert json.loads((model_dir / "tokenizer_config.json").read_text())["chat_template"] == template
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    roles = ("system", "developer", "user", "assistant", "tool")
    messages = [{"role": role, "content": role[:3]} for role in roles]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + (
        "<|im_start|>assistant\n"
    )
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 4
    assert json.loads((model_dir / "generation_config.json").read_text())["eos_token_id"] == [4, 2]


def test_weights_stay_small() -> None:
    total = sum(path.stat().st_size for path in WEIGHTS.rglob("*") if path.is_file())
    assert total < 3_000_000
