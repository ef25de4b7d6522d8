"""The executor's sampling configuration: defaults, range checks, and the greedy rule.

Range checks follow ``samplingConfig.cpp`` as the contract reads it (§2.8): beam_width in
[1, 1024], top_k >= 0, top_p in (0, 1] where a top_p <= 0 is dropped as "unset" *before* the
check, top_p_min in [0, 1], top_p_decay in (0, 1], temperature >= 0, min_tokens >= 0,
repetition_penalty > 0, length_penalty >= 0, num_return_sequences > 0 (and <= beam_width when
beam_width > 1). Presence and frequency penalties are not range-checked. A failure is a
``ConversionError`` (the sampling config is built while the request is converted).

The greedy rule (the stand-in's reading of TensorRT-LLM's defaults, where the contract leaves
top_k = 0 unsettled): with neither top_k nor top_p set (top_k 0 or 1, top_p unset) the next token
is the argmax and temperature has no effect; top_k > 1 samples among the k best, top_p samples
the nucleus, both with temperature. The seed defaults to 0, so unseeded sampling repeats itself
from request to request. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.trtllm_stand_ins.errors import ConversionError, assertion_failed

MAX_BEAM_WIDTH = 1024
"""kMaxBeamWidth: the executor's own bound (the model's max_beam_width is checked later)."""


@dataclass(frozen=True)
class SamplingConfig:
    beam_width: int = 1
    top_k: int | None = None
    top_p: float | None = None
    top_p_min: float | None = None
    top_p_decay: float | None = None
    temperature: float = 1.0
    min_tokens: int = 1
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    length_penalty: float = 1.0
    seed: int = 0
    num_return_sequences: int = 1

    @property
    def greedy(self) -> bool:
        top_k = self.top_k or 0
        if self.temperature < 1e-5 or top_k == 1:
            return True
        return top_k == 0 and self.top_p is None


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ConversionError(assertion_failed(what))


def build_sampling_config(
    *,
    beam_width: int | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    top_p_min: float | None = None,
    top_p_decay: float | None = None,
    temperature: float | None = None,
    min_tokens: int | None = None,
    repetition_penalty: float | None = None,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    length_penalty: float | None = None,
    seed: int | None = None,
    num_return_sequences: int | None = None,
) -> SamplingConfig:
    """The request's values (None: not sent) → a checked config; raises ConversionError."""
    if top_p is not None and top_p <= 0:
        top_p = None  # both backends drop a non-positive top_p as "unset" before the checks
    beam = 1 if beam_width is None else beam_width
    _check(1 <= beam <= MAX_BEAM_WIDTH, f"beam_width ({beam}) must be in [1, {MAX_BEAM_WIDTH}]")
    if top_k is not None:
        _check(top_k >= 0, f"top_k ({top_k}) must be >= 0")
    if top_p is not None:
        _check(top_p <= 1, f"top_p ({top_p:g}) must be in (0, 1]")
    if top_p_min is not None:
        _check(0 <= top_p_min <= 1, f"top_p_min ({top_p_min:g}) must be in [0, 1]")
    if top_p_decay is not None:
        _check(0 < top_p_decay <= 1, f"top_p_decay ({top_p_decay:g}) must be in (0, 1]")
    if temperature is not None:
        _check(temperature >= 0, f"temperature ({temperature:g}) must be >= 0")
    if min_tokens is not None:
        _check(min_tokens >= 0, f"min_tokens ({min_tokens}) must be >= 0")
    if repetition_penalty is not None:
        _check(repetition_penalty > 0, f"repetition_penalty ({repetition_penalty:g}) must be > 0")
    if length_penalty is not None:
        _check(length_penalty >= 0, f"length_penalty ({length_penalty:g}) must be >= 0")
    sequences = 1 if num_return_sequences is None else num_return_sequences
    _check(sequences > 0, f"num_return_sequences ({sequences}) must be > 0")
    if beam > 1:
        _check(sequences <= beam, f"num_return_sequences ({sequences}) must be <= beam_width ({beam})")
    return SamplingConfig(
        beam_width=beam,
        top_k=top_k,
        top_p=top_p,
        top_p_min=top_p_min,
        top_p_decay=top_p_decay,
        temperature=1.0 if temperature is None else temperature,
        min_tokens=1 if min_tokens is None else min_tokens,
        repetition_penalty=1.0 if repetition_penalty is None else repetition_penalty,
        presence_penalty=presence_penalty or 0.0,
        frequency_penalty=frequency_penalty or 0.0,
        length_penalty=1.0 if length_penalty is None else length_penalty,
        seed=0 if seed is None else seed,
        num_return_sequences=sequences,
    )
