"""The embedding request and the pooling of tiny-llm-embed, without Triton (unit-tested alone).

What it mirrors: Triton's vLLM backend reads ``embedding_request`` as JSON ``{"input": text or
token ids, "pooling_params": {"dimensions": [d]}}`` and answers the vector as a JSON list in
``text_output``; vLLM runs a causal LM converted to embed with LAST pooling (the final hidden
state, after the last norm, of the last token) and normalizes it, after cutting it to
``dimensions`` for a matryoshka model. Refusals use vLLM's words, which the gateway's error table
reads.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class EmbedRequestError(ValueError):
    """A request the model refuses (sent back as an INVALID_ARG error)."""


@dataclass(frozen=True)
class EmbedConfig:
    """What ``model.json`` says: the weights, the context length, the matryoshka sizes."""

    model_dir: Path
    max_model_len: int = 2048
    matryoshka_dimensions: tuple[int, ...] | None = None
    num_threads: int = 1


def load_embed_config(version_dir: Path) -> EmbedConfig:
    path = version_dir / "model.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or not isinstance(raw.get("model"), str):
        raise ValueError(f"{path}: 'model' (path to the weights directory) is required")
    model_dir = (version_dir / raw["model"]).resolve()
    if not (model_dir / "config.json").is_file():
        raise ValueError(f"{path}: 'model' points at {model_dir}, which has no config.json")
    overrides = raw.get("hf_overrides") or {}
    sizes = overrides.get("matryoshka_dimensions")
    return EmbedConfig(
        model_dir=model_dir,
        max_model_len=int(raw.get("max_model_len", 2048)),
        matryoshka_dimensions=tuple(int(d) for d in sizes) if isinstance(sizes, list) else None,
        num_threads=int(raw.get("num_threads", 1)),
    )


@dataclass(frozen=True)
class EmbedInput:
    """One request: the text or token ids to embed, and the output size (None: the full one)."""

    input: str | list[int]
    dimensions: int | None


def parse_embedding_request(raw: bytes | str, model_name: str, config: EmbedConfig, hidden_size: int) -> EmbedInput:
    """``embedding_request``'s JSON → what to embed; ``EmbedRequestError`` for what vLLM refuses."""
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise EmbedRequestError(f"embedding_request is not JSON: {exc}") from None
    if not isinstance(body, dict) or "input" not in body:
        raise EmbedRequestError("embedding_request must be a JSON object with an 'input'")
    value: Any = body["input"]
    if isinstance(value, str):
        text_or_ids: str | list[int] = value
    elif isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        text_or_ids = list(value)
    else:
        raise EmbedRequestError("embedding_request 'input' must be a string or a list of token ids")
    if len(text_or_ids) == 0:
        raise EmbedRequestError("The decoder prompt cannot be empty")
    params = body.get("pooling_params") or {}
    dims = params.get("dimensions") if isinstance(params, dict) else None
    dimensions = dims[0] if isinstance(dims, list) and dims else None
    if dimensions is not None:
        if not isinstance(dimensions, int) or dimensions < 1:
            raise EmbedRequestError("Dimensions must be greater than 0")
        allowed = config.matryoshka_dimensions
        if allowed is None:
            raise EmbedRequestError(
                f'Model "{model_name}" does not support matryoshka representation, '
                "changing output dimensions will lead to poor results."
            )
        if dimensions not in allowed or dimensions > hidden_size:
            raise EmbedRequestError(
                f'Model "{model_name}" only supports {list(allowed)} matryoshka dimensions, '
                "use other output dimensions will lead to poor results."
            )
    return EmbedInput(text_or_ids, dimensions)


def check_tokens(ids: list[int], vocab_size: int, max_model_len: int) -> None:
    """vLLM's input checks: every id in the vocabulary, the whole within the context."""
    bad = next((t for t in ids if t < 0 or t >= vocab_size), None)
    if bad is not None:
        raise EmbedRequestError(f"Token id {bad} is out of vocabulary")
    if len(ids) > max_model_len:
        raise EmbedRequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{len(ids)} input tokens. Please reduce the length of the input messages."
        )


def pool_last(last_hidden: list[float], dimensions: int | None) -> list[float]:
    """LAST pooling's vector (the last token's final hidden state), cut to ``dimensions``, then
    L2-normalized (vLLM: ``F.normalize(x, p=2, dim=-1)``, whose epsilon is 1e-12)."""
    vector = last_hidden[:dimensions] if dimensions is not None else list(last_hidden)
    norm = max(math.sqrt(sum(x * x for x in vector)), 1e-12)
    return [x / norm for x in vector]
