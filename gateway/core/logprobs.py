"""Backend logprob entries → OpenAI's two logprob shapes. Pure.

The vLLM-backend contract sends, per sequence and per new token, ``{token_id: {"logprob", "rank",
"decoded_token"}}`` with the sampled token first (vLLM puts it first; it may also appear among the
top-k, then once) and the top-k alternatives after it.

Chat's ``top_logprobs`` are the top k. Legacy completions' also hold the sampled token ("the API
will always return the logprob of the sampled token, so there may be up to logprobs+1 elements",
OpenAI's reference; vLLM's server does the same), first, as vLLM orders them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _split(entry: Mapping[str, Any], top: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    items = list(entry.values())
    sampled = items[0] if items else {"logprob": 0.0, "decoded_token": ""}
    ranked = sorted((i for i in items if i.get("rank") is not None), key=lambda i: i["rank"])
    return sampled, ranked[:top]


def _token(item: Mapping[str, Any]) -> str:
    token = item.get("decoded_token")
    return token if isinstance(token, str) else ""


def chat_logprobs(entries: Sequence[Mapping[str, Any]] | None, top: int) -> list[dict[str, Any]]:
    """``choices[].logprobs.content`` items for these tokens."""
    out = []
    for entry in entries or ():
        sampled, ranked = _split(entry, top)
        token = _token(sampled)
        out.append(
            {
                "token": token,
                "logprob": float(sampled.get("logprob", 0.0)),
                "bytes": list(token.encode("utf-8")),
                "top_logprobs": [
                    {"token": _token(i), "logprob": float(i["logprob"]), "bytes": list(_token(i).encode("utf-8"))}
                    for i in ranked
                ],
            }
        )
    return out


def completion_logprobs(entries: Sequence[Mapping[str, Any]] | None, top: int, text_offset: int) -> dict[str, Any]:
    """The legacy completions shape for these tokens, offsets counted from ``text_offset``."""
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    offsets: list[int] = []
    offset = text_offset
    for entry in entries or ():
        sampled, ranked = _split(entry, top)
        token = _token(sampled)
        tokens.append(token)
        token_logprobs.append(float(sampled.get("logprob", 0.0)))
        top_logprobs.append({_token(sampled): token_logprobs[-1], **{_token(i): float(i["logprob"]) for i in ranked}})
        offsets.append(offset)
        offset += len(token)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets}


def merge_completion_logprobs(parts: Sequence[Mapping[str, list[Any]]]) -> dict[str, list[Any]]:
    merged: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for part in parts:
        for key, values in merged.items():
            values.extend(part[key])
    return merged
