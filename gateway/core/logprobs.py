"""Backend logprob entries → OpenAI's two logprob shapes. Pure.

The vLLM-backend contract sends, per sequence and per new token, ``{token_id: {"logprob", "rank",
"decoded_token"}}`` with the sampled token first (vLLM puts it first; it may also appear among the
top-k, then once) and the top-k alternatives after it.

Chat's ``top_logprobs`` are the top k. Legacy completions' also hold the sampled token ("the API
will always return the logprob of the sampled token, so there may be up to logprobs+1 elements",
OpenAI's reference; vLLM's server does the same), first, as vLLM orders them.

``token_ids`` (vLLM's ``return_tokens_as_token_ids``) names every token ``token_id:<id>`` instead
of its text, for clients that must tell apart tokens whose text is not valid UTF-8 on its own. It
follows vLLM's server to the byte: chat's sampled token keeps its text's ``bytes`` (they rebuild
the answer), the alternatives' ``bytes`` are those of their ``token_id:<id>`` names, and legacy
``text_offset`` advances by the length of the names, as vLLM counts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_Item = tuple[str, Mapping[str, Any]]
"""A token's id (the entry's key) and its logprob record."""

_NO_TOKEN: _Item = ("", {"logprob": 0.0, "decoded_token": ""})


def _split(entry: Mapping[str, Any], top: int) -> tuple[_Item, list[_Item]]:
    items = list(entry.items())
    sampled = items[0] if items else _NO_TOKEN
    ranked = sorted((i for i in items if i[1].get("rank") is not None), key=lambda i: i[1]["rank"])
    return sampled, ranked[:top]


def _text(item: _Item) -> str:
    token = item[1].get("decoded_token")
    return token if isinstance(token, str) else ""


def _name(item: _Item, token_ids: bool) -> str:
    """The token as the answer shows it: its text, or ``token_id:<id>``."""
    return f"token_id:{item[0]}" if token_ids else _text(item)


def chat_logprobs(
    entries: Sequence[Mapping[str, Any]] | None, top: int, token_ids: bool = False
) -> list[dict[str, Any]]:
    """``choices[].logprobs.content`` items for these tokens."""
    out = []
    for entry in entries or ():
        sampled, ranked = _split(entry, top)
        alternatives = []
        for item in ranked:
            name = _name(item, token_ids)
            logprob = float(item[1]["logprob"])
            alternatives.append({"token": name, "logprob": logprob, "bytes": list(name.encode("utf-8"))})
        out.append(
            {
                "token": _name(sampled, token_ids),
                "logprob": float(sampled[1].get("logprob", 0.0)),
                "bytes": list(_text(sampled).encode("utf-8")),
                "top_logprobs": alternatives,
            }
        )
    return out


def completion_logprobs(
    entries: Sequence[Mapping[str, Any]] | None, top: int, text_offset: int, token_ids: bool = False
) -> dict[str, Any]:
    """The legacy completions shape for these tokens, offsets counted from ``text_offset``."""
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    offsets: list[int] = []
    offset = text_offset
    for entry in entries or ():
        sampled, ranked = _split(entry, top)
        token = _name(sampled, token_ids)
        tokens.append(token)
        token_logprobs.append(float(sampled[1].get("logprob", 0.0)))
        ranked_logprobs = {_name(i, token_ids): float(i[1]["logprob"]) for i in ranked}
        top_logprobs.append({token: token_logprobs[-1], **ranked_logprobs})
        offsets.append(offset)
        offset += len(token)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets}


def merge_completion_logprobs(parts: Sequence[Mapping[str, list[Any]]]) -> dict[str, list[Any]]:
    merged: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for part in parts:
        for key, values in merged.items():
            values.extend(part[key])
    return merged
