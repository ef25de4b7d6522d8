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
    RESUME_TOKEN_IDS,
    RETURN_TOKEN_IDS,
    TEXT_OUTPUT,
    TOKEN_IDS,
    OutputOptions,
    RawRequest,
    RequestError,
    build_outputs,
    resume_ids,
)
from engine import TinyLlmEngine
from generator import SequenceDelta
from model_config import STEP_DELAY_ENV, ModelConfigError, load_model_config, step_delay_from_env
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
    assert TOKEN_IDS not in outputs
    assert list(outputs[FINISH_REASON]) == ["None", "stop"]
    assert outputs[NUM_INPUT_TOKENS].dtype == np.uint32 and outputs[NUM_INPUT_TOKENS].shape == (1,)
    assert outputs[NUM_OUTPUT_TOKENS].dtype == np.uint32 and list(outputs[NUM_OUTPUT_TOKENS]) == [1, 0]
    assert list(outputs[LOGPROBS])[0] == "null"
    assert json.loads(outputs[LOGPROBS][1]) == DELTAS[1].logprobs
    assert outputs[CUMULATIVE_LOGPROB].dtype == np.float32


def test_token_ids_output_is_the_new_ids_as_int64() -> None:
    delta = SequenceDelta(b"ab", 2, None, -1.0, None, token_ids=(7, 1332))
    outputs = build_outputs([delta], OutputOptions(token_ids=True), num_input_tokens=5)
    assert outputs[TOKEN_IDS].dtype == np.int64 and list(outputs[TOKEN_IDS]) == [7, 1332]
    empty = build_outputs([DELTAS[1]], OutputOptions(token_ids=True), num_input_tokens=5)
    assert empty[TOKEN_IDS].dtype == np.int64 and empty[TOKEN_IDS].shape == (0,)


def test_resume_ids_are_checked_against_n_and_the_vocabulary() -> None:
    assert resume_ids(RawRequest(text_input=b"x"), n=3, vocab_size=10) == ()
    assert resume_ids(RawRequest(text_input=b"x", resume_token_ids=(0, 9)), n=1, vocab_size=10) == (0, 9)
    with pytest.raises(RequestError, match=r"input 'return_token_ids' needs n = 1, got n = 2"):
        resume_ids(RawRequest(text_input=b"x", return_token_ids=True), n=2, vocab_size=10)
    with pytest.raises(RequestError, match=r"input 'resume_token_ids' needs n = 1, got n = 2"):
        resume_ids(RawRequest(text_input=b"x", resume_token_ids=()), n=2, vocab_size=10)
    for bad in (10, -1):
        with pytest.raises(
            RequestError, match=rf"input 'resume_token_ids': id {bad} at position 1 is out of the vocab"
        ):
            resume_ids(RawRequest(text_input=b"x", resume_token_ids=(3, bad)), n=1, vocab_size=10)


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
    assert config.kv_cache_tokens == 65536


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
    (tmp_path / "model.json").write_text(json.dumps({"model": str(weights / "tiny-llm"), "kv_cache_tokens": 0}))
    with pytest.raises(ModelConfigError, match="'kv_cache_tokens' must be an integer >= 1"):
        load_model_config(tmp_path)
    (tmp_path / "model.json").write_text(json.dumps({"model": str(weights / "tiny-llm"), "kv_cache_tokens": 512}))
    assert load_model_config(tmp_path).kv_cache_tokens == 512


@pytest.mark.parametrize(("value", "seconds"), [(None, 0.0), ("", 0.0), ("0", 0.0), ("12.5", 0.0125), (" 40 ", 0.04)])
def test_step_delay_is_read_in_milliseconds(value: str | None, seconds: float) -> None:
    environ = {} if value is None else {STEP_DELAY_ENV: value}
    assert step_delay_from_env(environ) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["slow", "-1", "nan", "inf", "5ms"])
def test_a_bad_step_delay_fails_the_load_naming_the_variable(value: str) -> None:
    with pytest.raises(
        ModelConfigError, match=f"TINY_LLM_STEP_DELAY_MS must be a number of milliseconds >= 0, got '{value}'"
    ):
        step_delay_from_env({STEP_DELAY_ENV: value})


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
        RETURN_TOKEN_IDS,
        RESUME_TOKEN_IDS,
        TEXT_OUTPUT,
        FINISH_REASON,
        NUM_INPUT_TOKENS,
        NUM_OUTPUT_TOKENS,
        LOGPROBS,
        CUMULATIVE_LOGPROB,
        TOKEN_IDS,
    ]
    assert text.count("optional: true") == 11
    assert re.search(r'name: "resume_token_ids"\s+data_type: TYPE_INT64\s+dims: \[ -1 \]', text)
    assert re.search(r'name: "token_ids"\s+data_type: TYPE_INT64\s+dims: \[ -1 \]', text)
