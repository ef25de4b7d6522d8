"""TensorRT-LLM's ``tensorrt_llm`` model itself: token ids in, token ids out.

The gateway tokenizes the prompt (``GenerationRequest.tokens``) and the core detokenizes what
comes back with one incremental decoder per choice (``core/detokenize.py``), so the text is that
of the whole sequence decoded at once, for every tokenizer (no space lost between responses, no
character split into U+FFFD), and token counts are the ids themselves. This is the layout that
gives exact text; an ensemble or BLS model whose ``tensorrt_llm`` step and tokenizer the gateway
can see is driven through it (``models/catalog.py``).

Responses carry ``output_ids`` [batch, beam, tokens] and ``sequence_length`` [batch, beam]:
while streaming the tokens new since the last response (several at once is normal), when not
all of them, after the prompt unless ``exclude_input_in_output`` took it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tritonclient.grpc import service_pb2

from gateway.backend.contracts.continuation import Continuation, by_tokens, constrained
from gateway.backend.contracts.interface import add_declared, add_matrix, add_priority
from gateway.backend.contracts.tensors import Outputs, ReadRaws, unpack_numbers
from gateway.backend.contracts.trtllm_fields import (
    TOKENS_FIELDS,
    LoraAdapter,
    add_flag,
    add_guide,
    add_lora,
    add_scalars,
    refuse,
    task_of,
)
from gateway.backend.types import GenerationChunk, GenerationRequest, ModelInterface, Produced
from gateway.errors import BackendError

_HANDLED = frozenset({"bad_words", "structured_outputs", "lora_name", "logprobs", "stop_token_ids"})


def words_list(sequences: Sequence[Sequence[int]]) -> list[list[int]]:
    """TensorRT-LLM's ``[2, L]`` word list: every word's ids concatenated, then the cumulative
    end offsets padded with -1 to the same length (as its preprocessing step builds it)."""
    ids = [i for word in sequences for i in word]
    offsets: list[int] = []
    end = 0
    for word in sequences:
        end += len(word)
        offsets.append(end)
    offsets += [-1] * (len(ids) - len(offsets))
    return [ids, offsets]


class TokenReader:
    """One call's responses → chunks of token ids (the prompt's dropped when it was echoed), with
    each token's log-probability (``output_log_probs``: the sampled token's only) where asked.
    Logprob entries are vLLM's shape without the token's text, which the core's detokenizer
    fills in."""

    __slots__ = ("_prompt", "_drop", "_block")

    def __init__(self, prompt: int, drop: int, block: int | None = None) -> None:
        self._prompt = prompt
        self._block = block
        self._drop = drop
        """Ids to drop from the front of the first response: an echoed prompt."""

    def __call__(self, outputs: Outputs, raws: Sequence[bytes], final: bool) -> GenerationChunk:
        ids: tuple[int, ...] | None = None
        length: int | None = None
        logprobs: tuple[float, ...] | None = None
        cached: int | None = None
        for (name, datatype), raw in zip(outputs, raws, strict=False):
            if name == "kv_cache_reused_blocks" and self._block is not None and datatype == "INT32" and raw:
                cached = min(int(unpack_numbers(raw[:4], datatype)[0]) * self._block, self._prompt)
            elif name == "output_log_probs" and datatype == "FP32":
                logprobs = tuple(map(float, unpack_numbers(raw, datatype)))
            elif name == "output_ids":
                if datatype != "INT32":
                    raise BackendError(f"unexpected datatype {datatype} for output_ids")
                ids = tuple(map(int, unpack_numbers(raw, datatype)))
            elif name == "sequence_length":
                length = int(unpack_numbers(raw[:4], datatype)[0]) if len(raw) >= 4 else 0
        if ids is None:  # an empty final response
            return GenerationChunk((b"",), (None,), self._prompt, None, None, final, ((),), cached)
        if length is not None:
            ids = ids[:length]  # beam 0 of batch item 0; the rest is padding
        if self._drop:
            ids, self._drop = ids[self._drop :], 0
        entries = None
        if logprobs is not None:  # the tokens of this response, in order (beam 0)
            pairs = zip(ids, logprobs[: len(ids)], strict=True) if len(logprobs) >= len(ids) else ()
            entries = ([{str(i): {"logprob": lp, "rank": None, "decoded_token": None}} for i, lp in pairs],)
        return GenerationChunk((b"",), (None,), self._prompt, (len(ids),), entries, final, (ids,), cached)


class TokensContract:
    """The ``tensorrt_llm`` model, built from its interface."""

    layout = "tensorrt_llm"
    reports_prompt_tokens = True
    reports_completion_tokens = True

    def __init__(
        self,
        interface: ModelInterface,
        *,
        echoes: bool,
        adapters: Mapping[str, LoraAdapter] | None = None,
        guided: bool = True,
        kv_block_tokens: int | None = None,
    ) -> None:
        """``echoes``: a whole answer starts with the prompt's ids unless told otherwise (the
        model's ``exclude_input_in_output`` parameter is not true)."""
        self.interface = interface
        self._echoes = echoes and "exclude_input_in_output" not in interface.inputs
        self._adapters = dict(adapters or {})
        self.guided = guided
        self._block = kv_block_tokens if "return_perf_metrics" in interface.inputs else None
        """Tokens per KV block, for cached tokens (``TextContract``'s)."""

    def streams(self, request: GenerationRequest) -> bool:
        return request.stream and self.interface.decoupled and "streaming" in self.interface.inputs

    def encode(self, request: GenerationRequest, *, lora_weights: bool = False) -> bytes:
        interface, layout = self.interface, self.layout
        tokens = request.tokens
        if tokens is None:
            raise BackendError(f"a request for '{request.model}' (tensorrt_llm) came without token ids")
        infer = service_pb2.ModelInferRequest(model_name=request.model, id=request.request_id)
        add_priority(infer, request.priority)
        add_declared(infer, interface, "input_ids", list(tokens.ids))
        add_declared(infer, interface, "input_lengths", [len(tokens.ids)])
        for name, value in (("end_id", tokens.end_id), ("pad_id", tokens.pad_id), ("beam_width", 1)):
            if name in interface.inputs:
                add_declared(infer, interface, name, [value])
        add_flag(infer, interface, "streaming", self.streams(request))
        add_flag(infer, interface, "exclude_input_in_output", True)
        if self._block is not None:
            add_flag(infer, interface, "return_perf_metrics", True)
        top = request.sampling.get("logprobs")
        if top is not None:
            if top > 0:
                raise refuse(
                    request, layout, "logprobs", "it returns the sampled token's log-probability alone (top 0)"
                )
            if not add_flag(infer, interface, "return_log_probs", True):
                raise refuse(request, layout, "logprobs")
        add_scalars(infer, interface, request, layout, TOKENS_FIELDS, _HANDLED)
        stops = list(tokens.stop_words) + [(i,) for i in request.sampling.get("stop_token_ids") or ()]
        self._add_words(infer, request, "stop_words_list", stops, "stop_token_ids")
        self._add_words(infer, request, "bad_words_list", tokens.bad_words, "bad_words")
        add_guide(infer, interface, request, layout, self.guided)
        add_lora(infer, interface, request, layout, self._adapters, lora_weights)
        return bytes(infer.SerializeToString())

    def _add_words(
        self, infer: Any, request: GenerationRequest, name: str, sequences: Sequence[Sequence[int]], field: str
    ) -> None:
        sequences = [s for s in sequences if s]
        if not sequences:
            return
        if name not in self.interface.inputs:
            if field == "stop_token_ids" and not request.sampling.get("stop_token_ids"):
                return  # stop strings are cut by the gateway anyway
            raise refuse(request, self.layout, field)
        add_matrix(infer, self.interface, name, words_list(sequences))

    def parser(self, request: GenerationRequest) -> TokenReader:
        tokens = request.tokens
        prompt = len(tokens.ids) if tokens is not None else 0
        return TokenReader(prompt, prompt if self._echoes and not self.streams(request) else 0, self._block)

    def plan(self, outputs: Outputs) -> ReadRaws | None:
        return None

    def uses_lora_task(self, request: GenerationRequest) -> int | None:
        return task_of(request, self._adapters)

    def stop_message(self, request: GenerationRequest) -> tuple[str, bytes] | None:
        return None  # a Triton cancel reaches the model itself (polled every cancellation_check_period_ms)

    def migratable(self, request: GenerationRequest) -> GenerationRequest | None:
        return None if constrained(request) else request

    def continuation(self, request: GenerationRequest, produced: Produced) -> Continuation | None:
        return by_tokens(request, produced)


def stop_request(model: str, interface: ModelInterface, request_id: str) -> bytes:
    """TensorRT-LLM's way to stop a running request by its Triton request id: a request with
    ``stop`` true and that id (its required inputs filled with one token's worth)."""
    infer = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    add_declared(infer, interface, "input_lengths", [1])
    add_declared(infer, interface, "request_output_len", [1])
    add_declared(infer, interface, "stop", [True])
    return bytes(infer.SerializeToString())
