"""What the ``preprocessing`` and ``postprocessing`` stand-ins compute (contract §1.3, §1.4). Pure.

Preprocessing: each query tokenized as is (no chat template), a BOS added when
``add_special_tokens`` (default true), the batch right-padded with the pad id; stop and bad words
to ``[batch, 2, L]`` (words.py); the embedding bias words to a vocab-sized vector; end and pad ids
from the request or else from the tokenizer (the first id of the eos token encoded without special
tokens; the pad token's, or the eos token's when there is none); the decoder input ``[pad_id]``
when no decoder query is given.

Postprocessing: ``tokens[:sequence_length]`` of every beam decoded on its own with
``skip_special_tokens`` (default true), and nothing remembered between calls: a streamed
response's text is decoded without the tokens before it, so SentencePiece's leading space of the
response's first token is lost, and a character split across two responses comes out as U+FFFD,
exactly as upstream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tests.trtllm_stand_ins.tokenizer import HfTokenizer
from tests.trtllm_stand_ins.words import to_words_tensor

MULTIMODAL_INPUTS = ("IMAGE_BYTES", "IMAGE_URL", "IMAGES", "VIDEO_BYTES")


class PreprocessingError(ValueError):
    """The request cannot be tokenized as sent."""


def _texts(array: NDArray[Any] | None, batch: int) -> list[list[str]]:
    """A BYTES ``[batch, N]`` input → each batch item's strings (empty lists when absent)."""
    if array is None:
        return [[] for _ in range(batch)]
    rows = array.reshape(array.shape[0], -1) if array.ndim > 0 else array.reshape(1, 1)
    return [[item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in row] for row in rows]


def _column(array: NDArray[Any] | None, batch: int) -> list[object | None]:
    if array is None:
        return [None] * batch
    flat = array.reshape(array.shape[0] if array.ndim else 1, -1)[:, 0]
    return [value.item() if isinstance(value, np.generic) else value for value in flat]


def _int_or(value: object | None, default: int) -> int:
    return default if value is None else int(value)  # type: ignore[call-overload]


@dataclass(frozen=True)
class Preprocessor:
    tokenizer: HfTokenizer
    add_special_tokens: bool = True

    def ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=self.add_special_tokens)

    def word_ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def run(self, arrays: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
        for name in MULTIMODAL_INPUTS:
            if name in arrays:
                raise PreprocessingError(f"the stand-in preprocessing is text-only: {name} is not supported")
        query = arrays["QUERY"]
        batch = int(query.shape[0]) if query.ndim else 1
        queries = [texts[0] if texts else "" for texts in _texts(query, batch)]
        end_ids = [_int_or(value, self.tokenizer.end_id) for value in _column(arrays.get("END_ID"), batch)]
        pad_ids = [_int_or(value, self.tokenizer.pad_id) for value in _column(arrays.get("PAD_ID"), batch)]
        input_ids, input_lengths = _padded([self.ids(text) for text in queries], pad_ids)
        outputs = {
            "INPUT_ID": input_ids,
            "REQUEST_INPUT_LEN": input_lengths,
            "BAD_WORDS_IDS": to_words_tensor(_texts(arrays.get("BAD_WORDS_DICT"), batch), self.word_ids),
            "STOP_WORDS_IDS": to_words_tensor(_texts(arrays.get("STOP_WORDS_DICT"), batch), self.word_ids),
            "EMBEDDING_BIAS": self._bias(arrays, batch),
            "REQUEST_OUTPUT_LEN": np.asarray(arrays["REQUEST_OUTPUT_LEN"], dtype=np.int32).reshape(batch, -1),
            "OUT_END_ID": np.array(end_ids, dtype=np.int32).reshape(batch, 1),
            "OUT_PAD_ID": np.array(pad_ids, dtype=np.int32).reshape(batch, 1),
        }
        outputs.update(self._decoder(arrays, batch, pad_ids))
        extra = _column(arrays.get("PROMPT_TABLE_EXTRA_ID"), batch)
        if any(value is not None for value in extra):
            width = input_ids.shape[1]
            outputs["OUT_PROMPT_TABLE_EXTRA_IDS"] = np.array(
                [[_int_or(value, 0)] * width for value in extra], dtype=np.uint64
            )
        return outputs

    def _decoder(self, arrays: dict[str, NDArray[Any]], batch: int, pad_ids: list[int]) -> dict[str, NDArray[Any]]:
        queries = _texts(arrays.get("DECODER_QUERY"), batch)
        ids = [self.ids(texts[0]) if texts and texts[0] else [pad] for texts, pad in zip(queries, pad_ids, strict=True)]
        padded, lengths = _padded(ids, pad_ids)
        return {"DECODER_INPUT_ID": padded, "REQUEST_DECODER_INPUT_LEN": lengths}

    def _bias(self, arrays: dict[str, NDArray[Any]], batch: int) -> NDArray[Any]:
        """Vocab-sized bias per batch item: each word's weight on every token of the word; with no
        bias words an empty ``[batch, 0]`` (which tensorrt_llm ignores)."""
        words = _texts(arrays.get("EMBEDDING_BIAS_WORDS"), batch)
        if not any(words):
            return np.zeros((batch, 0), dtype=np.float32)
        weights_array = arrays.get("EMBEDDING_BIAS_WEIGHTS")
        weights = np.zeros((batch, 0), dtype=np.float32) if weights_array is None else weights_array.reshape(batch, -1)
        bias = np.zeros((batch, self.tokenizer.vocab_size), dtype=np.float32)
        for index, item_words in enumerate(words):
            if len(item_words) != weights.shape[1]:
                raise PreprocessingError(
                    f"EMBEDDING_BIAS_WORDS has {len(item_words)} words but EMBEDDING_BIAS_WEIGHTS {weights.shape[1]} weights"
                )
            for word, weight in zip(item_words, weights[index], strict=True):
                bias[index, self.word_ids(word)] = weight
        return bias


def _padded(sequences: Sequence[list[int]], pad_ids: Sequence[int]) -> tuple[NDArray[Any], NDArray[Any]]:
    """Right-padded ``[batch, max_len]`` INT32 ids and ``[batch, 1]`` lengths."""
    width = max((len(ids) for ids in sequences), default=0)
    padded = np.empty((len(sequences), width), dtype=np.int32)
    for index, (ids, pad) in enumerate(zip(sequences, pad_ids, strict=True)):
        padded[index, :] = pad
        padded[index, : len(ids)] = ids
    lengths = np.array([[len(ids)] for ids in sequences], dtype=np.int32)
    return padded, lengths


def postprocess(
    tokenizer: HfTokenizer, tokens: NDArray[Any], lengths: NDArray[Any], skip_special_tokens: bool
) -> NDArray[Any]:
    """``TOKENS_BATCH`` ``[batch, beam, T]`` + ``SEQUENCE_LENGTH`` ``[batch, beam]`` → ``OUTPUT``
    ``[batch, beam]`` (BYTES): every beam decoded on its own."""
    batch = tokens.shape[0]
    beams = tokens.reshape(batch, -1, tokens.shape[-1]) if tokens.ndim != 2 else tokens.reshape(batch, 1, -1)
    lengths = lengths.reshape(batch, -1)
    texts = [
        [
            tokenizer.decode(
                beams[b, k, : int(lengths[b, k])].tolist(), skip_special_tokens=skip_special_tokens
            ).encode("utf-8")
            for k in range(beams.shape[1])
        ]
        for b in range(batch)
    ]
    return np.array(texts, dtype=object).reshape(batch, beams.shape[1])
