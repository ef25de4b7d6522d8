"""The request that continues a generation on another replica after its own failed mid-stream.

The replica pool decides to move a stream (``backend/replicas/stream.py``); the contract says how,
because only it knows whether its model takes token ids, and it builds the request with one of:

- **Replay** (a model that declares ``resume_token_ids`` and ``return_token_ids``: the reference
  model). The same prompt and sampling, and the ids generated so far, which the model replays as
  its own output, one decode step each, before it goes on. Exact: stop strings, penalties,
  ``min_tokens``/``max_tokens``, a structured-output grammar and seeded draws all see those
  tokens as output, as they would have without the failure, and the model sends nothing for
  them, so the client's stream goes on at the next token.
- **Tokens** (TensorRT-LLM's ``tensorrt_llm`` layout, which takes ``input_ids``): the prompt's ids
  followed by the generated ids, ``max_tokens`` and ``min_tokens`` reduced by what was produced.
  The same tokens, so greedy decoding goes on as it would have, up to the numerics of prefilling
  what was decoded (an engine that prefills in one pass may break a near tie differently). The
  engine takes the generated tokens for prompt: presence and frequency penalties no longer count
  them, and a seeded sampler starts its draws afresh.
- **Text** (Triton's vLLM backend, the TensorRT-LLM text layouts): the prompt followed by the
  generated text, ``max_tokens`` and ``min_tokens`` reduced. What that costs in exactness besides
  the above: the engine tokenizes the text again, and may split it into other tokens than it
  generated (BPE merges across the old token boundaries), so even greedy decoding can continue
  differently from an uninterrupted run. A character cut at the end is left out of the prompt
  and its bytes skipped when the continuation generates it again.

A stream under a structured-output constraint is continued only by replay (a grammar started
again on the continuation would constrain it from the start), and by text only where the backend
counts its tokens (else ``max_tokens`` could not be reduced).
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway.backend.types import GenerationRequest, Produced

RESUME_TOKEN_IDS = "resume_token_ids"
RETURN_TOKEN_IDS = "return_token_ids"
TOKEN_IDS = "token_ids"


@dataclass(frozen=True, slots=True)
class Continuation:
    """What the pool sends to the next replica, and what to drop of its answer."""

    request: GenerationRequest
    skip_bytes: int = 0
    """Bytes at the start of the continuation's text that the client has already been sent
    (part of a character cut by the failure, which the continuation generates whole)."""


def constrained(request: GenerationRequest) -> bool:
    """Whether a structured-output constraint shapes the output (only replay keeps it)."""
    return request.sampling.get("structured_outputs") is not None


def replays(request: GenerationRequest) -> bool:
    """Whether the model can continue the request exactly, by replaying its generated ids."""
    inputs = request.inputs
    return RESUME_TOKEN_IDS in inputs and RETURN_TOKEN_IDS in inputs


def reduced_sampling(sampling: Mapping[str, Any], produced: int) -> dict[str, Any] | None:
    """``sampling`` for the rest of the output: ``max_tokens`` and ``min_tokens`` less what was
    produced. None when nothing is left to generate."""
    rest = dict(sampling)
    max_tokens = rest.get("max_tokens")
    if max_tokens is not None:
        if max_tokens - produced <= 0:
            return None
        rest["max_tokens"] = max_tokens - produced
    min_tokens = rest.get("min_tokens")
    if min_tokens:
        rest["min_tokens"] = max(0, min_tokens - produced)
    return rest


def by_replay(request: GenerationRequest, produced: Produced) -> Continuation | None:
    if not produced.ids_known:
        return None
    return Continuation(replace(request, resume_ids=tuple(produced.ids)))


def by_tokens(request: GenerationRequest, produced: Produced) -> Continuation | None:
    tokens = request.tokens
    if tokens is None or not produced.ids_known or constrained(request):
        return None
    sampling = reduced_sampling(request.sampling, len(produced.ids))
    if sampling is None:
        return None
    ids = tokens.ids + tuple(produced.ids)
    return Continuation(replace(request, tokens=replace(tokens, ids=ids), sampling=sampling))


def by_text(request: GenerationRequest, produced: Produced) -> Continuation | None:
    if not produced.counted or constrained(request):
        return None
    sampling = reduced_sampling(request.sampling, produced.tokens)
    if sampling is None:
        return None
    # An incremental decoder keeps back the bytes of a character cut at the end, as the
    # assembler's does: the assembler already holds them, so they are skipped when the
    # continuation generates that character again.
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    prompt = request.prompt + decoder.decode(bytes(produced.text))
    held, _ = decoder.getstate()
    return Continuation(replace(request, prompt=prompt, sampling=sampling), skip_bytes=len(held))
