"""The bodies of ``/tokenize``, ``/detokenize`` (vLLM's) and ``/v1/responses/input_tokens`` (OpenAI's)."""

from __future__ import annotations

from typing import Any

from gateway.plan.tokenize import Tokenized


def tokenize_object(result: Tokenized) -> dict[str, Any]:
    """vLLM's ``TokenizeResponse``: ``token_strs`` only when asked for."""
    body: dict[str, Any] = {"count": len(result.tokens), "max_model_len": result.max_model_len, "tokens": result.tokens}
    if result.token_strs is not None:
        body["token_strs"] = result.token_strs
    return body


def detokenize_object(text: str) -> dict[str, Any]:
    return {"prompt": text}


def input_tokens_object(count: int) -> dict[str, Any]:
    return {"object": "response.input_tokens", "input_tokens": count}
