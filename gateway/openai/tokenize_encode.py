"""The bodies of ``/tokenize``, ``/detokenize`` (vLLM's) and ``/v1/responses/input_tokens`` (OpenAI's)."""

from __future__ import annotations

from typing import Any

from gateway.plan.tokenize import Tokenized


def tokenize_object(result: Tokenized) -> dict[str, Any]:
    """vLLM's ``TokenizeResponse``, ``token_strs`` null unless asked for (vLLM writes it so)."""
    return {
        "count": len(result.tokens),
        "max_model_len": result.max_model_len,
        "tokens": result.tokens,
        "token_strs": result.token_strs,
    }


def detokenize_object(text: str) -> dict[str, Any]:
    return {"prompt": text}


def input_tokens_object(count: int) -> dict[str, Any]:
    return {"object": "response.input_tokens", "input_tokens": count}
