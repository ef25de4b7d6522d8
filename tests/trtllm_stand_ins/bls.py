"""The ``tensorrt_llm_bls`` rules (contract §1.5, §2.5, §2.6, §2.9), apart from Triton. Pure.

How the BLS maps its inputs: to ``preprocessing`` (``PREPROCESSING_INPUTS``), then to the
generating model from its own inputs and preprocessing's outputs (``engine_inputs``), forwarding
every sampling, flag, LoRA and guide input except ``num_return_sequences``, which the BLS ignores.
Outputs the model returns besides the tokens pass through unchanged (``PASSTHROUGH_OUTPUTS``,
token counts included).

Text per response: with ``accumulate_tokens`` false each response's tokens are decoded on their
own (a delta, spaces lost as in the ensemble); with it true the tokens of every response so far
are concatenated per ``batch_index`` and decoded together (cumulative text, beam 1 only).
Stop words are also checked as text (``TextStops``): not streaming, the text is cut after the
first stop string; streaming, the response where one completes is cut after it and every later
response's text is blank, and the model is told to stop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

PREPROCESSING_INPUTS = {
    "QUERY": "text_input",
    "DECODER_QUERY": "decoder_text_input",
    "REQUEST_OUTPUT_LEN": "max_tokens",
    "BAD_WORDS_DICT": "bad_words",
    "STOP_WORDS_DICT": "stop_words",
    "EMBEDDING_BIAS_WORDS": "embedding_bias_words",
    "EMBEDDING_BIAS_WEIGHTS": "embedding_bias_weights",
    "END_ID": "end_id",
    "PAD_ID": "pad_id",
    "PROMPT_TABLE_EXTRA_ID": "prompt_table_extra_id",
    "IMAGE_BYTES": "image_bytes_input",
    "IMAGE_URL": "image_url_input",
    "VIDEO_BYTES": "video_bytes_input",
}
PREPROCESSING_OUTPUTS = (
    "INPUT_ID",
    "REQUEST_INPUT_LEN",
    "REQUEST_OUTPUT_LEN",
    "OUT_END_ID",
    "OUT_PAD_ID",
    "STOP_WORDS_IDS",
    "BAD_WORDS_IDS",
    "EMBEDDING_BIAS",
    "OUT_PROMPT_TABLE_EXTRA_IDS",
)
ENGINE_FROM_PREPROCESSING = {
    "input_ids": "INPUT_ID",
    "input_lengths": "REQUEST_INPUT_LEN",
    "request_output_len": "REQUEST_OUTPUT_LEN",
    "end_id": "OUT_END_ID",
    "pad_id": "OUT_PAD_ID",
    "stop_words_list": "STOP_WORDS_IDS",
    "bad_words_list": "BAD_WORDS_IDS",
    "embedding_bias": "EMBEDDING_BIAS",
    "prompt_table_extra_ids": "OUT_PROMPT_TABLE_EXTRA_IDS",
}
ENGINE_FROM_REQUEST = {
    "streaming": "stream",
    "runtime_top_k": "top_k",
    "runtime_top_p": "top_p",
    "temperature": "temperature",
    "len_penalty": "length_penalty",
    "repetition_penalty": "repetition_penalty",
    "min_tokens": "min_tokens",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "seed": "seed",
    "beam_width": "beam_width",
    "exclude_input_in_output": "exclude_input_in_output",
    "return_log_probs": "return_log_probs",
    "return_context_logits": "return_context_logits",
    "return_generation_logits": "return_generation_logits",
    "return_perf_metrics": "return_perf_metrics",
    "return_num_input_tokens": "return_num_input_tokens",
    "return_num_output_tokens": "return_num_output_tokens",
    "prompt_embedding_table": "prompt_embedding_table",
    "prompt_vocab_size": "prompt_vocab_size",
    "lora_task_id": "lora_task_id",
    "lora_weights": "lora_weights",
    "lora_config": "lora_config",
    "guided_decoding_guide_type": "guided_decoding_guide_type",
    "guided_decoding_guide": "guided_decoding_guide",
}
PASSTHROUGH_OUTPUTS = (
    "cum_log_probs",
    "output_log_probs",
    "context_logits",
    "generation_logits",
    "batch_index",
    "sequence_index",
    "kv_cache_alloc_new_blocks",
    "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "acceptance_rate",
    "total_accepted_draft_tokens",
    "total_draft_tokens",
    "num_input_tokens",
    "num_output_tokens",
)
ENGINE_OUTPUTS = ("output_ids", "sequence_length", *PASSTHROUGH_OUTPUTS)
TEXT_ONLY_INPUTS = ("image_input", "image_bytes_input", "image_url_input", "video_bytes_input")

Arrays = Mapping[str, NDArray[Any]]


class BlsError(ValueError):
    """A request the stand-in BLS refuses (the text goes into the traceback it answers with)."""


def preprocessing_inputs(request: Arrays) -> dict[str, NDArray[Any]]:
    for name in TEXT_ONLY_INPUTS:
        if name in request:
            raise BlsError(f"the stand-in BLS is text-only: {name} is not supported (no multimodal encoders)")
    return {target: request[source] for target, source in PREPROCESSING_INPUTS.items() if source in request}


def engine_inputs(request: Arrays, preprocessed: Arrays) -> dict[str, NDArray[Any]]:
    inputs = {
        target: preprocessed[source] for target, source in ENGINE_FROM_PREPROCESSING.items() if source in preprocessed
    }
    if "embedding_bias" in inputs and inputs["embedding_bias"].size == 0:
        del inputs["embedding_bias"]
    inputs.update({target: request[source] for target, source in ENGINE_FROM_REQUEST.items() if source in request})
    return inputs


def stop_strings(request: Arrays) -> list[str]:
    words = request.get("stop_words")
    if words is None:
        return []
    return [w.decode("utf-8") if isinstance(w, bytes) else str(w) for w in words.reshape(-1) if w]


def is_streaming(request: Arrays) -> bool:
    value = request.get("stream")
    return bool(value is not None and value.size and value.reshape(-1)[0])


@dataclass
class TokenAccumulator:
    """The tokens to decode for each response: this response's, or (accumulating) all so far."""

    accumulate: bool
    _tokens: dict[int, list[int]] = field(default_factory=dict)

    def tokens_for(
        self, output_ids: NDArray[Any], lengths: NDArray[Any], batch_index: int
    ) -> tuple[NDArray[Any], NDArray[Any]]:
        """``output_ids`` ``[1, beam, T]`` and ``sequence_length`` ``[1, beam]`` of one response →
        what postprocessing decodes."""
        if not self.accumulate:
            return output_ids, lengths
        if output_ids.shape[1] != 1:
            raise BlsError("Accumulation of tokens is only implemented for beam width = 1")
        so_far = self._tokens.setdefault(batch_index, [])
        so_far.extend(output_ids[0, 0, : int(lengths.reshape(-1)[0])].tolist())
        return np.array([[so_far]], dtype=np.int32), np.array([[len(so_far)]], dtype=np.int32)


@dataclass
class TextStops:
    """Stop strings checked on the text the BLS sends (see the module docstring)."""

    stops: Sequence[str]
    cumulative: bool
    stopped: bool = False
    _text: str = ""

    def apply(self, text: str) -> str:
        """The text to send for this response."""
        if self.stopped:
            return ""
        if not self.stops:
            return text
        before = "" if self.cumulative else self._text
        whole = text if self.cumulative else self._text + text
        ends = [whole.find(stop) + len(stop) for stop in self.stops if stop and stop in whole]
        self._text = whole
        if not ends:
            return text
        self.stopped = True
        cut = whole[: min(ends)]
        return cut if self.cumulative else cut[len(before) :]
