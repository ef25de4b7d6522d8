"""The v0.5.0 ensemble's request (contract §3, row v0.5.0), apart from Triton. Pure.

That release's ensemble took ``max_tokens``, ``end_id``, ``pad_id``, ``top_k``, ``min_length`` and
``beam_width`` as UINT32 (Triton itself refuses an INT32 tensor for them, before the model sees the
request), ``random_seed`` UINT64, ``bad_words``/``stop_words`` as one required comma-separated
string per batch item, no ``exclude_input_in_output`` input (the model parameter decides: false,
so the prompt is echoed when not streaming) and no token counts. Each response's tokens are
decoded on their own, as that postprocessing did.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tests.trtllm_stand_ins.tokenizer import HfTokenizer
from tests.trtllm_stand_ins.words import parse_v05_words, to_words_tensor

Arrays = Mapping[str, NDArray[Any]]

# v0.5.0 name → (tensorrt_llm name, dtype)
_SCALARS = {
    "end_id": ("end_id", np.int32),
    "pad_id": ("pad_id", np.int32),
    "top_k": ("runtime_top_k", np.int32),
    "top_p": ("runtime_top_p", np.float32),
    "temperature": ("temperature", np.float32),
    "length_penalty": ("len_penalty", np.float32),
    "repetition_penalty": ("repetition_penalty", np.float32),
    "min_length": ("min_tokens", np.int32),
    "presence_penalty": ("presence_penalty", np.float32),
    "random_seed": ("seed", np.uint64),
    "beam_width": ("beam_width", np.int32),
}


def _first(array: NDArray[Any]) -> object:
    value = array.reshape(-1)[0]
    return value.item() if isinstance(value, np.generic) else value


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def is_streaming(request: Arrays) -> bool:
    stream = request.get("stream")
    return bool(stream is not None and stream.size and _first(stream))


class V05Error(ValueError):
    """A request the stand-in refuses."""


def engine_inputs(request: Arrays, tokenizer: HfTokenizer, exclude_input: bool) -> dict[str, NDArray[Any]]:
    """The ``tensorrt_llm`` request for a batch-1 request (the stand-in serves one item per request)."""
    batch = request["text_input"].shape[0] if request["text_input"].ndim else 1
    if batch != 1:
        raise V05Error(f"the stand-in serves one prompt per request, got a batch of {batch}")
    prompt = tokenizer.encode(_text(_first(request["text_input"])))
    inputs = {
        "input_ids": np.array([prompt], dtype=np.int32),
        "input_lengths": np.array([[len(prompt)]], dtype=np.int32),
        "request_output_len": np.array([[int(_first(request["max_tokens"]))]], dtype=np.int32),  # type: ignore[call-overload]
        "streaming": np.array([[is_streaming(request)]]),
        "exclude_input_in_output": np.array([[exclude_input]]),
        "bad_words_list": to_words_tensor([parse_v05_words(_first(request["bad_words"]))], _words(tokenizer)),
        "stop_words_list": to_words_tensor([parse_v05_words(_first(request["stop_words"]))], _words(tokenizer)),
    }
    if "end_id" not in request:
        inputs["end_id"] = np.array([[tokenizer.end_id]], dtype=np.int32)
    if "pad_id" not in request:
        inputs["pad_id"] = np.array([[tokenizer.pad_id]], dtype=np.int32)
    for name, (target, dtype) in _SCALARS.items():
        if name in request and request[name].size:
            inputs[target] = np.array([[_first(request[name])]], dtype=dtype)
    return inputs


def _words(tokenizer: HfTokenizer) -> Callable[[str], list[int]]:
    return lambda word: tokenizer.encode(word, add_special_tokens=False)


def text_output(tokenizer: HfTokenizer, output_ids: NDArray[Any], lengths: NDArray[Any]) -> NDArray[Any]:
    """One response's tokens decoded on their own → ``text_output`` ``[1, 1]``."""
    length = int(lengths.reshape(-1)[0])
    text = tokenizer.decode(output_ids.reshape(-1)[:length].tolist(), skip_special_tokens=True)
    return np.array([[text.encode("utf-8")]], dtype=object)
