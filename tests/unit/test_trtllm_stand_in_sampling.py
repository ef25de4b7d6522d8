"""The executor's sampling checks and defaults (tests/trtllm_stand_ins/sampling.py)."""

from __future__ import annotations

import pytest

from tests.trtllm_stand_ins.errors import ConversionError
from tests.trtllm_stand_ins.sampling import build_sampling_config


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("top_k", -1, "[TensorRT-LLM][ERROR] Assertion failed: top_k (-1) must be >= 0"),
        ("top_p", 1.5, "[TensorRT-LLM][ERROR] Assertion failed: top_p (1.5) must be in (0, 1]"),
        ("temperature", -1.0, "[TensorRT-LLM][ERROR] Assertion failed: temperature (-1) must be >= 0"),
        ("beam_width", 0, "[TensorRT-LLM][ERROR] Assertion failed: beam_width (0) must be in [1, 1024]"),
        ("min_tokens", -2, "[TensorRT-LLM][ERROR] Assertion failed: min_tokens (-2) must be >= 0"),
        ("repetition_penalty", 0.0, "[TensorRT-LLM][ERROR] Assertion failed: repetition_penalty (0) must be > 0"),
        ("length_penalty", -1.0, "[TensorRT-LLM][ERROR] Assertion failed: length_penalty (-1) must be >= 0"),
        ("top_p_min", 2.0, "[TensorRT-LLM][ERROR] Assertion failed: top_p_min (2) must be in [0, 1]"),
        ("top_p_decay", 0.0, "[TensorRT-LLM][ERROR] Assertion failed: top_p_decay (0) must be in (0, 1]"),
        ("num_return_sequences", 0, "[TensorRT-LLM][ERROR] Assertion failed: num_return_sequences (0) must be > 0"),
    ],
)
def test_out_of_range_values_fail_with_an_assertion_naming_the_field(field: str, value: float, message: str) -> None:
    with pytest.raises(ConversionError) as failed:
        build_sampling_config(**{field: value})  # type: ignore[arg-type]
    assert str(failed.value) == message


def test_a_top_p_at_or_below_zero_is_unset_before_the_check() -> None:
    assert build_sampling_config(top_p=0.0).top_p is None
    assert build_sampling_config(top_p=-3.0).top_p is None


def test_more_sequences_than_beams_fail_only_with_beam_search() -> None:
    assert build_sampling_config(num_return_sequences=3).num_return_sequences == 3
    with pytest.raises(ConversionError, match="must be <= beam_width"):
        build_sampling_config(beam_width=2, num_return_sequences=3)


def test_defaults_are_greedy_with_seed_zero_and_one_minimum_token() -> None:
    config = build_sampling_config()
    assert config.greedy and config.seed == 0 and config.min_tokens == 1 and config.temperature == 1.0


@pytest.mark.parametrize(
    ("values", "greedy"),
    [
        ({"temperature": 0.8}, True),  # no top_k/top_p: temperature alone does not sample
        ({"top_k": 1, "top_p": 0.9}, True),
        ({"top_k": 0, "top_p": 0.9}, False),
        ({"top_k": 5}, False),
        ({"top_k": 5, "temperature": 0.0}, True),
    ],
)
def test_the_greedy_rule(values: dict[str, float], greedy: bool) -> None:
    assert build_sampling_config(**values).greedy is greedy  # type: ignore[arg-type]


def test_penalties_are_not_range_checked() -> None:
    config = build_sampling_config(presence_penalty=-7.0, frequency_penalty=9.0)
    assert (config.presence_penalty, config.frequency_penalty) == (-7.0, 9.0)
