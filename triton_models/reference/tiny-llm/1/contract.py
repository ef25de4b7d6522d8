"""The vLLM-backend tensor contract: input names in, numpy output tensors out.

Why apart from model.py: the shapes and dtypes here are exactly what the gateway decodes, so they
are unit-tested without Triton; model.py only wraps these arrays in ``pb_utils.Tensor``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
from dataclasses import dataclass

import numpy as np
from generator import SequenceDelta
from PIL import Image

TEXT_INPUT = "text_input"
STREAM = "stream"
SAMPLING_PARAMETERS = "sampling_parameters"
IMAGE = "image"
EXCLUDE_INPUT_IN_OUTPUT = "exclude_input_in_output"
RETURN_FINISH_REASON = "return_finish_reason"
RETURN_NUM_INPUT_TOKENS = "return_num_input_tokens"
RETURN_NUM_OUTPUT_TOKENS = "return_num_output_tokens"
RETURN_LOGPROBS = "return_logprobs"
RETURN_CUMULATIVE_LOGPROB = "return_cumulative_logprob"
RETURN_TOKEN_IDS = "return_token_ids"
RESUME_TOKEN_IDS = "resume_token_ids"
BOOL_INPUTS = (
    STREAM,
    EXCLUDE_INPUT_IN_OUTPUT,
    RETURN_FINISH_REASON,
    RETURN_NUM_INPUT_TOKENS,
    RETURN_NUM_OUTPUT_TOKENS,
    RETURN_LOGPROBS,
    RETURN_CUMULATIVE_LOGPROB,
    RETURN_TOKEN_IDS,
)

TEXT_OUTPUT = "text_output"
FINISH_REASON = "finish_reason"
NUM_INPUT_TOKENS = "num_input_tokens"
NUM_OUTPUT_TOKENS = "num_output_tokens"
LOGPROBS = "logprobs"
CUMULATIVE_LOGPROB = "cumulative_logprob"
TOKEN_IDS = "token_ids"


class RequestError(ValueError):
    """The request's tensors are unusable (missing prompt, not UTF-8); sent back as INVALID_ARG."""


@dataclass(frozen=True)
class RawRequest:
    """The request's input tensors, already read out of Triton (absent optional inputs are None)."""

    text_input: bytes | None
    sampling_parameters: bytes | None = None
    stream: bool | None = None
    exclude_input_in_output: bool | None = None
    return_finish_reason: bool | None = None
    return_num_input_tokens: bool | None = None
    return_num_output_tokens: bool | None = None
    return_logprobs: bool | None = None
    return_cumulative_logprob: bool | None = None
    return_token_ids: bool | None = None
    images: tuple[bytes, ...] = ()
    """The ``image`` input's elements: base64 image files, as the vLLM backend takes them."""
    resume_token_ids: tuple[int, ...] | None = None
    """Tokens this request already generated elsewhere, to replay as its own output (None: absent)."""

    def prompt(self) -> str:
        """The prompt as text; vLLM takes a str prompt, so non-UTF-8 bytes are a client error."""
        if self.text_input is None:
            raise RequestError(f"input '{TEXT_INPUT}' is required")
        try:
            return self.text_input.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestError(f"input '{TEXT_INPUT}' is not valid UTF-8: {exc}") from None


def resume_ids(request: RawRequest, n: int, vocab_size: int) -> tuple[int, ...]:
    """The ids to replay, checked: a replay continues one sequence, and each id must be a token.
    The inputs that only make sense for one sequence are refused with ``n`` > 1 by name, so the
    gateway's error says which of its inputs was wrong."""
    for name, present in (
        (RETURN_TOKEN_IDS, bool(request.return_token_ids)),
        (RESUME_TOKEN_IDS, request.resume_token_ids is not None),
    ):
        if present and n != 1:
            raise RequestError(f"input '{name}' needs n = 1, got n = {n}")
    ids = request.resume_token_ids or ()
    for position, token in enumerate(ids):
        if not 0 <= token < vocab_size:
            raise RequestError(
                f"input '{RESUME_TOKEN_IDS}': id {token} at position {position} is out of the vocabulary "
                f"(0..{vocab_size - 1})"
            )
    return ids


def image_lines(images: tuple[bytes, ...]) -> bytes:
    """One line ``[image <width>x<height> <sha256 of the RGB pixels, 16 hex>]`` per image, decoded
    as the vLLM backend decodes them (base64, Pillow, ``convert("RGB")``): the model says them
    before its answer, so a test can tell exactly which pixels arrived, in which order."""
    lines = []
    for position, encoded in enumerate(images):
        try:
            with Image.open(io.BytesIO(base64.b64decode(encoded, validate=True))) as image:
                rgb = image.convert("RGB")
        except Exception as exc:  # noqa: BLE001 - any undecodable element is the client's error
            raise RequestError(f"input '{IMAGE}' element {position} is not a base64 image: {exc}") from None
        digest = hashlib.sha256(rgb.tobytes()).hexdigest()[:16]
        lines.append(f"[image {rgb.width}x{rgb.height} {digest}]\n".encode())
    return b"".join(lines)


@dataclass(frozen=True)
class OutputOptions:
    """Which optional outputs to send (like vLLM: only those whose ``return_*`` flag is true)."""

    finish_reason: bool = False
    num_input_tokens: bool = False
    num_output_tokens: bool = False
    logprobs: bool = False
    cumulative_logprob: bool = False
    token_ids: bool = False

    @classmethod
    def from_request(cls, request: RawRequest) -> OutputOptions:
        return cls(
            finish_reason=bool(request.return_finish_reason),
            num_input_tokens=bool(request.return_num_input_tokens),
            num_output_tokens=bool(request.return_num_output_tokens),
            logprobs=bool(request.return_logprobs),
            cumulative_logprob=bool(request.return_cumulative_logprob),
            token_ids=bool(request.return_token_ids),
        )


def build_outputs(
    deltas: list[SequenceDelta], options: OutputOptions, num_input_tokens: int, prefix: bytes = b""
) -> dict[str, np.ndarray]:
    """One response's output tensors: one element per sequence (``prefix`` echoes the prompt).
    ``token_ids`` is the one sequence's new ids (``resume_ids`` refuses it with ``n`` > 1)."""
    outputs: dict[str, np.ndarray] = {
        TEXT_OUTPUT: np.array([prefix + delta.text for delta in deltas], dtype=np.object_),
    }
    if options.finish_reason:
        outputs[FINISH_REASON] = np.array([str(delta.finish_reason) for delta in deltas], dtype=np.object_)
    if options.num_input_tokens:
        outputs[NUM_INPUT_TOKENS] = np.array([num_input_tokens], dtype=np.uint32)
    if options.num_output_tokens:
        outputs[NUM_OUTPUT_TOKENS] = np.array([delta.num_tokens for delta in deltas], dtype=np.uint32)
    if options.logprobs:
        outputs[LOGPROBS] = np.array(
            [json.dumps(delta.logprobs, ensure_ascii=False) for delta in deltas], dtype=np.object_
        )
    if options.cumulative_logprob:
        outputs[CUMULATIVE_LOGPROB] = np.array([delta.cumulative_logprob for delta in deltas], dtype=np.float32)
    if options.token_ids:
        outputs[TOKEN_IDS] = np.array(deltas[0].token_ids, dtype=np.int64)
    return outputs
