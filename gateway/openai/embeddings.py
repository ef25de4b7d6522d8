"""The ``/v1/embeddings`` response body, as bytes.

OpenAI's shape: ``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
"model", "usage": {"prompt_tokens", "total_tokens"}}``. ``base64`` is each vector's
little-endian float32 bytes, base64-encoded, as OpenAI sends it (its SDK decodes it with
``numpy.frombuffer(..., dtype="float32")``); ``struct`` packs a whole vector in one call, with
no object per float.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

import orjson

from gateway.core.embed import EmbeddingPlan, EmbeddingResult


def base64_floats(vector: list[float]) -> str:
    """The vector as OpenAI's ``base64`` encoding: float32, little-endian."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def encode_embeddings(plan: EmbeddingPlan, result: EmbeddingResult) -> bytes:
    """The whole response body."""
    as_base64 = plan.encoding_format == "base64"
    data: list[dict[str, Any]] = [
        {"object": "embedding", "index": index, "embedding": base64_floats(vector) if as_base64 else vector}
        for index, vector in enumerate(result.vectors)
    ]
    tokens = result.prompt_tokens
    return orjson.dumps(
        {
            "object": "list",
            "data": data,
            "model": plan.model_id,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )
