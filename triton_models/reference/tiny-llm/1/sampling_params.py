"""Parse and validate the ``sampling_parameters`` JSON of the vLLM-backend contract.

Why strict: the real vLLM backend coerces loosely (``bool("false")`` is true) and fails on unknown
keys with an unhelpful message. This reference model instead rejects anything it does not
understand with a message that names the key, so the gateway's tests catch a wrong field name or
JSON type at once. Field names and defaults are vLLM's ``SamplingParams``; a JSON ``null`` means
"use the default" for every field. ``structured_outputs`` (or ``guided_decoding``) is parsed by
structured_outputs.py and compiled later (grammar.py). Pure Python: unit-tested without torch or Triton.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from structured_outputs import STRUCTURED_KEYS, StructuredOutputs, StructuredOutputsError, parse_structured_outputs


class SamplingParamsError(ValueError):
    """The request's sampling parameters are invalid; the message is sent back as INVALID_ARG."""


@dataclass(frozen=True)
class SamplingLimits:
    """Bounds that depend on the loaded model, checked while parsing."""

    vocab_size: int
    max_logprobs: int = 20
    max_n: int = 256
    lora_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class SamplingParams:
    """The subset of vLLM's SamplingParams that tiny-llm implements (see the README's table)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    max_tokens: int | None = 16
    min_tokens: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    ignore_eos: bool = False
    logprobs: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    """Accepted, no effect: text is the tokens' own bytes, never joined with spaces."""
    include_stop_str_in_output: bool = False
    lora_name: str | None = None
    bad_words: tuple[str, ...] = ()
    """Words whose tokens must not be generated in sequence (bad_words.py)."""
    allowed_token_ids: tuple[int, ...] | None = None
    """When set, the only tokens that may be sampled."""
    structured: StructuredOutputs | None = None
    """From ``structured_outputs`` (or ``guided_decoding``): the constraint the tokens must follow."""

    @property
    def greedy(self) -> bool:
        """vLLM treats a temperature below 1e-5 as greedy (argmax) sampling."""
        return self.temperature < 1e-5


def _fail(key: str, expectation: str, value: Any) -> SamplingParamsError:
    return SamplingParamsError(f"sampling_parameters: '{key}' {expectation}, got {json.dumps(value)}")


def _as_int(key: str, value: Any) -> int:
    # bool is an int subclass in Python: JSON true must not pass as 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(key, "must be an integer", value)
    return value


def _as_float(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(key, "must be a finite number", value)
    return float(value)


def _as_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(key, "must be true or false", value)
    return value


def _as_str(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(key, "must be a string", value)
    return value


def _as_stop(key: str, value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) and item for item in items):
        raise _fail(key, "must be a non-empty string or a list of non-empty strings", value)
    return tuple(items)


def _as_token_ids(key: str, value: Any, vocab_size: int) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise _fail(key, "must be a list of token ids", value)
    ids = tuple(_as_int(key, item) for item in value)
    for token_id in ids:
        if not 0 <= token_id < vocab_size:
            raise _fail(key, f"must hold token ids in [0, {vocab_size})", value)
    return ids


def _as_words(key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _fail(key, "must be a list of strings", value)
    return tuple(dict.fromkeys(value))


def _as_allowed_ids(key: str, value: Any, vocab_size: int) -> tuple[int, ...]:
    ids = _as_token_ids(key, value, vocab_size)
    if not ids:
        raise _fail(key, "must not be empty", value)
    return ids


def _as_logit_bias(key: str, value: Any, vocab_size: int) -> dict[int, float]:
    if not isinstance(value, dict):
        raise _fail(key, "must be an object mapping token ids to numbers", value)
    bias: dict[int, float] = {}
    for raw_id, raw_bias in value.items():
        try:
            token_id = int(raw_id)
        except (TypeError, ValueError):
            raise _fail(key, "keys must be token ids", value) from None
        if not 0 <= token_id < vocab_size:
            raise _fail(key, f"keys must be token ids in [0, {vocab_size})", value)
        # OpenAI documents [-100, 100]; vLLM clamps rather than rejects.
        bias[token_id] = min(100.0, max(-100.0, _as_float(key, raw_bias)))
    return bias


def _check(key: str, ok: bool, expectation: str, value: Any) -> None:
    if not ok:
        raise _fail(key, expectation, value)


def _parse_fields(data: dict[str, Any], limits: SamplingLimits) -> dict[str, Any]:
    """Type-check every present, non-null field; unknown keys are errors."""
    parsed: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _KNOWN_KEYS:
            known = sorted(_KNOWN_KEYS)
            raise SamplingParamsError(f"sampling_parameters: unknown key '{key}'; tiny-llm supports {known}")
        if value is None:
            continue
        if key in STRUCTURED_KEYS:
            if "structured" in parsed:
                raise SamplingParamsError(f"structured outputs: give one of {list(STRUCTURED_KEYS)}, not both")
            parsed["structured"] = _as_structured(key, value)
        else:
            parsed[key] = _PARSERS[key](key, value, limits)
    return parsed


def _as_structured(key: str, value: Any) -> StructuredOutputs:
    try:
        return parse_structured_outputs(key, value)
    except StructuredOutputsError as exc:
        raise SamplingParamsError(str(exc)) from None


def _check_ranges(params: SamplingParams, limits: SamplingLimits) -> None:
    """Range checks mirroring vLLM's SamplingParams._verify_args, key named in every message."""
    _check("n", 1 <= params.n <= limits.max_n, f"must be in [1, {limits.max_n}]", params.n)
    _check("temperature", params.temperature >= 0, "must be >= 0", params.temperature)
    _check("top_p", 0 < params.top_p <= 1, "must be in (0, 1]", params.top_p)
    _check("top_k", params.top_k >= -1, "must be -1, 0 (off) or a positive integer", params.top_k)
    _check("min_p", 0 <= params.min_p <= 1, "must be in [0, 1]", params.min_p)
    if params.max_tokens is not None:
        _check("max_tokens", params.max_tokens >= 1, "must be >= 1", params.max_tokens)
    _check("min_tokens", params.min_tokens >= 0, "must be >= 0", params.min_tokens)
    if params.max_tokens is not None:
        _check(
            "min_tokens",
            params.min_tokens <= params.max_tokens,
            f"must be <= max_tokens ({params.max_tokens})",
            params.min_tokens,
        )
    _check("repetition_penalty", params.repetition_penalty > 0, "must be > 0", params.repetition_penalty)
    _check("presence_penalty", -2 <= params.presence_penalty <= 2, "must be in [-2, 2]", params.presence_penalty)
    _check("frequency_penalty", -2 <= params.frequency_penalty <= 2, "must be in [-2, 2]", params.frequency_penalty)
    if params.logprobs is not None:
        _check(
            "logprobs",
            0 <= params.logprobs <= limits.max_logprobs,
            f"must be in [0, {limits.max_logprobs}]",
            params.logprobs,
        )
    if params.lora_name is not None and params.lora_name not in limits.lora_names:
        # Exactly the vLLM backend's wording (its list is a Python list repr).
        raise SamplingParamsError(
            f"LoRA {params.lora_name} is not supported, we currently support {list(limits.lora_names)}"
        )


def parse_sampling_parameters(raw: str | bytes | None, limits: SamplingLimits) -> SamplingParams:
    """Turn the request's ``sampling_parameters`` tensor value into SamplingParams, or raise."""
    if raw is None or raw in ("", b""):
        data: Any = {}
    else:
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SamplingParamsError(f"sampling_parameters: malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SamplingParamsError(f"sampling_parameters: must be a JSON object, got {type(data).__name__}")
    params = SamplingParams(**_parse_fields(data, limits))
    _check_ranges(params, limits)
    return params


def _scalar(convert: Any) -> Any:
    return lambda key, value, _limits: convert(key, value)


_PARSERS: dict[str, Any] = {
    "n": _scalar(_as_int),
    "temperature": _scalar(_as_float),
    "top_p": _scalar(_as_float),
    "top_k": _scalar(_as_int),
    "min_p": _scalar(_as_float),
    "max_tokens": _scalar(_as_int),
    "min_tokens": _scalar(_as_int),
    "seed": _scalar(_as_int),
    "stop": _scalar(_as_stop),
    "stop_token_ids": lambda key, value, limits: _as_token_ids(key, value, limits.vocab_size),
    "repetition_penalty": _scalar(_as_float),
    "presence_penalty": _scalar(_as_float),
    "frequency_penalty": _scalar(_as_float),
    "ignore_eos": _scalar(_as_bool),
    "logprobs": _scalar(_as_int),
    "logit_bias": lambda key, value, limits: _as_logit_bias(key, value, limits.vocab_size),
    "skip_special_tokens": _scalar(_as_bool),
    "spaces_between_special_tokens": _scalar(_as_bool),
    "bad_words": _scalar(_as_words),
    "allowed_token_ids": lambda key, value, limits: _as_allowed_ids(key, value, limits.vocab_size),
    "include_stop_str_in_output": _scalar(_as_bool),
    "lora_name": _scalar(_as_str),
}
_KNOWN_KEYS = frozenset({*_PARSERS, *STRUCTURED_KEYS})
