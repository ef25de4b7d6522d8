"""Output tensors (names, dtypes, shapes), token bytes, model.json/multi_lora.json and config.pbtxt."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from contract import (
    CUMULATIVE_LOGPROB,
    FINISH_REASON,
    LOGPROBS,
    NUM_INPUT_TOKENS,
    NUM_OUTPUT_TOKENS,
    TEXT_OUTPUT,
    OutputOptions,
    RawRequest,
    RequestError,
    build_outputs,
)
from engine import TinyLlmEngine
from generator import SequenceDelta
from model_config import ModelConfigError, load_model_config
from token_bytes import byte_alphabet, token_to_bytes

from .conftest import MODEL_VERSION_DIR

DELTAS = [
    SequenceDelta(text=b"\xe2\x82", num_tokens=1, logprobs=None, cumulative_logprob=-1.5, finish_reason=None),
    SequenceDelta(
        text=b"",
        num_tokens=0,
        logprobs=[{"7": {"logprob": -0.1, "rank": 1, "decoded_token": "x"}}],
        cumulative_logprob=-2.0,
        finish_reason="stop",
    ),
]


def test_only_text_output_without_return_flags() -> None:
    outputs = build_outputs(DELTAS, OutputOptions(), num_input_tokens=5)
    assert set(outputs) == {TEXT_OUTPUT}
    assert outputs[TEXT_OUTPUT].dtype == np.object_ and list(outputs[TEXT_OUTPUT]) == [b"\xe2\x82", b""]


def test_all_optional_outputs_have_the_contract_types() -> None:
    options = OutputOptions(True, True, True, True, True)
    outputs = build_outputs(DELTAS, options, num_input_tokens=5)
    assert list(outputs[FINISH_REASON]) == ["None", "stop"]
    assert outputs[NUM_INPUT_TOKENS].dtype == np.uint32 and outputs[NUM_INPUT_TOKENS].shape == (1,)
    assert outputs[NUM_OUTPUT_TOKENS].dtype == np.uint32 and list(outputs[NUM_OUTPUT_TOKENS]) == [1, 0]
    assert list(outputs[LOGPROBS])[0] == "null"
    assert json.loads(outputs[LOGPROBS][1]) == DELTAS[1].logprobs
    assert outputs[CUMULATIVE_LOGPROB].dtype == np.float32


def test_prompt_must_be_present_and_utf8() -> None:
    with pytest.raises(RequestError, match="text_input"):
        RawRequest(text_input=None).prompt()
    with pytest.raises(RequestError, match="UTF-8"):
        RawRequest(text_input=b"\xff").prompt()


def test_byte_alphabet_is_a_bijection_and_round_trips() -> None:
    alphabet = byte_alphabet()
    assert len(set(alphabet.values())) == 256
    assert token_to_bytes("".join(alphabet[b] for b in range(256))) == bytes(range(256))


def test_token_bytes_concatenate_to_the_tokenizer_decode(engine: TinyLlmEngine) -> None:
    text = "<|im_start|>user\nCafé 日本語 😀 naïve straße ∑<|im_end|>\n"
    ids = engine.tokenize(text)
    assert b"".join(engine.token_bytes[i] for i in ids).decode() == text
    assert engine.tokenizer.decode(ids) == text


def test_committed_model_config_resolves_weights_and_adapters() -> None:
    config = load_model_config(MODEL_VERSION_DIR)
    assert config.model_dir.name == "tiny-llm" and (config.model_dir / "tokenizer.json").is_file()
    assert list(config.adapters) == ["alpha", "beta"]
    assert config.max_model_len == 131072
    assert config.max_images == 8  # limit_mm_per_prompt, which also tells the gateway it takes images


def test_model_config_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="missing"):
        load_model_config(tmp_path)
    (tmp_path / "model.json").write_text('{"model": "nowhere"}')
    with pytest.raises(ModelConfigError, match="no config.json"):
        load_model_config(tmp_path)
    weights = MODEL_VERSION_DIR.parent.parent.parent / "weights"
    (tmp_path / "model.json").write_text(json.dumps({"model": str(weights / "tiny-llm"), "gpu_memory": 1}))
    with pytest.raises(ModelConfigError, match="unknown keys"):
        load_model_config(tmp_path)
    (tmp_path / "model.json").write_text(json.dumps({"model": str(weights / "tiny-llm"), "enable_lora": True}))
    with pytest.raises(ModelConfigError, match="multi_lora.json is missing"):
        load_model_config(tmp_path)
    (tmp_path / "multi_lora.json").write_text(json.dumps({"alpha": str(weights / "lora" / "alpha")}))
    (tmp_path / "model.json").write_text(
        json.dumps({"model": str(weights / "tiny-llm"), "enable_lora": True, "max_lora_rank": 4})
    )
    with pytest.raises(ModelConfigError, match="exceeds max_lora_rank"):
        load_model_config(tmp_path)
    (tmp_path / "model.json").write_text(
        json.dumps({"model": str(weights / "tiny-llm"), "limit_mm_per_prompt": {"video": 1}})
    )
    with pytest.raises(ModelConfigError, match="limit_mm_per_prompt"):
        load_model_config(tmp_path)


def test_config_pbtxt_declares_the_contract() -> None:
    text = (MODEL_VERSION_DIR.parent / "config.pbtxt").read_text()
    assert 'backend: "python"' in text and "max_batch_size: 0" in text and "decoupled: true" in text
    names = re.findall(r'name: "(\w+)"', text)
    assert names == [
        "text_input",
        "image",
        "stream",
        "sampling_parameters",
        "exclude_input_in_output",
        "return_finish_reason",
        "return_num_input_tokens",
        "return_num_output_tokens",
        "return_logprobs",
        "return_cumulative_logprob",
        TEXT_OUTPUT,
        FINISH_REASON,
        NUM_INPUT_TOKENS,
        NUM_OUTPUT_TOKENS,
        LOGPROBS,
        CUMULATIVE_LOGPROB,
    ]
    assert text.count("optional: true") == 9
