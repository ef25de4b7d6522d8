"""Run one request on both servers and reduce each answer to what must match.

Ids, timestamps and vLLM's extra fields (``stop_reason``, ``token_ids``...) differ by design;
text, finish reasons, token counts and logprobs must not. Model ids are mapped: the gateway serves
adapters as ``tiny-llm:<adapter>``, vLLM as ``<adapter>``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai

MODEL = "tiny-llm"


def gateway_id(adapter: str | None) -> str:
    return MODEL if adapter is None else f"{MODEL}:{adapter}"


def vllm_id(adapter: str | None) -> str:
    return MODEL if adapter is None else adapter


def messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@dataclass(frozen=True)
class Answer:
    """One choice and the usage, reduced to what the two servers must agree on."""

    texts: tuple[str, ...]
    finish_reasons: tuple[str | None, ...]
    usage: tuple[int, int, int] | None
    logprobs: tuple[Any, ...] = ()


def _usage(usage: Any) -> tuple[int, int, int] | None:
    return None if usage is None else (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)


def chat(client: openai.OpenAI, adapter: str | None, model_id: Callable[[str | None], str], **kwargs: Any) -> Answer:
    response = client.chat.completions.create(model=model_id(adapter), **kwargs)
    choices = sorted(response.choices, key=lambda c: c.index)
    return Answer(
        tuple(c.message.content or "" for c in choices),
        tuple(c.finish_reason for c in choices),
        _usage(response.usage),
        tuple(c.logprobs.model_dump() if c.logprobs else None for c in choices),
    )


def chat_stream(
    client: openai.OpenAI, adapter: str | None, model_id: Callable[[str | None], str], **kwargs: Any
) -> tuple[Answer, list[str]]:
    """The streamed answer, and the content pieces as sent (chunking may differ; text may not)."""
    stream = client.chat.completions.create(
        model=model_id(adapter), stream=True, stream_options={"include_usage": True}, **kwargs
    )
    texts: dict[int, str] = {}
    finish: dict[int, str | None] = {}
    logprobs: dict[int, list[Any]] = {}
    pieces: list[str] = []
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            content = choice.delta.content or ""
            texts[choice.index] = texts.get(choice.index, "") + content
            if content:
                pieces.append(content)
            if choice.finish_reason is not None:
                finish[choice.index] = choice.finish_reason
            if choice.logprobs and choice.logprobs.content:
                logprobs.setdefault(choice.index, []).extend(t.model_dump() for t in choice.logprobs.content)
    indexes = sorted(texts)
    answer = Answer(
        tuple(texts[i] for i in indexes),
        tuple(finish.get(i) for i in indexes),
        _usage(usage),
        tuple(logprobs.get(i) for i in indexes),
    )
    return answer, pieces


def completion(
    client: openai.OpenAI, adapter: str | None, model_id: Callable[[str | None], str], **kwargs: Any
) -> Answer:
    response = client.completions.create(model=model_id(adapter), **kwargs)
    choices = sorted(response.choices, key=lambda c: c.index)
    return Answer(
        tuple(c.text for c in choices),
        tuple(c.finish_reason for c in choices),
        _usage(response.usage),
        tuple(c.logprobs.model_dump() if c.logprobs else None for c in choices),
    )


def completion_stream(
    client: openai.OpenAI, adapter: str | None, model_id: Callable[[str | None], str], **kwargs: Any
) -> Answer:
    stream = client.completions.create(
        model=model_id(adapter), stream=True, stream_options={"include_usage": True}, **kwargs
    )
    texts: dict[int, str] = {}
    finish: dict[int, str | None] = {}
    logprobs: dict[int, dict[str, list[Any]]] = {}
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason is not None:
                finish[choice.index] = choice.finish_reason
            if choice.logprobs is not None:
                merged = logprobs.setdefault(choice.index, {})
                for key, values in choice.logprobs.model_dump().items():
                    merged.setdefault(key, []).extend(values or [])
    indexes = sorted(texts)
    return Answer(
        tuple(texts[i] for i in indexes),
        tuple(finish.get(i) for i in indexes),
        _usage(usage),
        tuple(logprobs.get(i) for i in indexes),
    )


def both(
    call: Callable[..., Any], gw: openai.OpenAI, vl: openai.OpenAI, adapter: str | None = None, **kwargs: Any
) -> tuple[Any, Any]:
    """The same request on the gateway and on vLLM (adapter ids mapped per server)."""
    return call(gw, adapter, gateway_id, **kwargs), call(vl, adapter, vllm_id, **kwargs)


def status_of(call: Callable[[], Any]) -> int:
    """The HTTP status a request ends with (200 when it succeeds)."""
    try:
        call()
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


def close_logprobs(left: Any, right: Any, tolerance: float = 1e-4) -> bool:
    """Equal structures, floats within ``tolerance`` (the engines run the same kernels, but a
    batch of one vs. a batch shared with another request may round differently)."""
    if isinstance(left, float) and isinstance(right, float):
        return abs(left - right) <= tolerance
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(close_logprobs(left[k], right[k], tolerance) for k in left)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(
            close_logprobs(a, b, tolerance) for a, b in zip(left, right, strict=True)
        )
    return bool(left == right)
