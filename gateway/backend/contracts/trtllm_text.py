"""TensorRT-LLM's text-in, text-out layouts: the ``ensemble`` (preprocessing → tensorrt_llm →
postprocessing), the ``tensorrt_llm_bls`` model, and ensembles of every release back to v0.5.

What the model declares decides the request (``contracts/interface.py``), and what it is
decides how its answers read:

- it streams from the backend only where it is decoupled (the C++ backend refuses ``streaming``
  otherwise); a model that is not answers once, and a streaming client gets that answer as one
  chunk;
- a whole answer echoes the prompt unless ``exclude_input_in_output`` is sent, which ensembles
  before v0.16 do not declare: the echoed prompt is then cut off the text where the text starts
  with it (a prompt the tokenizer gives back unchanged; streaming from the model instead would
  avoid the echo but decode each response alone, losing SentencePiece spaces);
- streamed ``text_output`` is each response's tokens decoded alone (a delta: SentencePiece
  tokenizers lose the spaces between responses there, which only driving ``tensorrt_llm`` with
  the gateway's own detokenizer avoids), except from a BLS model with ``accumulate_tokens``,
  which sends the whole text so far: it is turned into deltas here, a trailing U+FFFD (a
  character whose bytes have not all come) held back until it resolves;
- token counts come from ``num_input_tokens``/``num_output_tokens`` where the model declares
  them (asked for with ``return_num_*``): per response a delta when streaming, the total when
  not, which then includes an echoed prompt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tritonclient.grpc import service_pb2

from gateway.backend.contracts.continuation import Continuation, by_text, constrained
from gateway.backend.contracts.interface import add_declared, add_priority
from gateway.backend.contracts.tensors import Outputs, ReadRaws, split_bytes, unpack_numbers
from gateway.backend.contracts.trtllm_fields import (
    ENSEMBLE_FIELDS,
    LoraAdapter,
    add_flag,
    add_guide,
    add_lora,
    add_scalars,
    refuse,
    task_of,
    words,
)
from gateway.backend.contracts.trtllm_tokens import stop_request
from gateway.backend.types import GenerationChunk, GenerationRequest, ModelInterface, Produced
from gateway.errors import BackendError

_REPLACEMENT = "\ufffd".encode()
_HANDLED = frozenset({"bad_words", "structured_outputs", "lora_name", "logprobs"})
_DEFAULTS: dict[str, list[Any]] = {"beam_width": [1], "stop_words": [""], "bad_words": [""]}
"""Inputs a model may require that the gateway fills when a request does not set them."""


def read_count(raw: bytes, datatype: str) -> int:
    """The sum of an integer count tensor's values (one per beam)."""
    if datatype == "FP32":
        raise BackendError(f"unexpected datatype {datatype} for a token count")
    return int(sum(unpack_numbers(raw, datatype)))


class TextReader:
    """One call's responses → chunks: the first sequence's text (delta, or cumulative turned
    into deltas), its counts, and a finish reason where the layout has one."""

    __slots__ = ("_cumulative", "_strip", "_subtract", "_sent", "_whole", "_finish", "_block")

    def __init__(
        self,
        *,
        cumulative: bool,
        strip: bytes | None,
        subtract_prompt: bool,
        finish: Any = None,
        block: int | None = None,
    ) -> None:
        self._cumulative = cumulative
        self._strip = strip
        """The prompt, cut off the front of the first text (an echo the model could not be
        told to leave out)."""
        self._subtract = subtract_prompt
        self._sent = b""
        self._whole = b""
        """The last whole text a cumulative layout sent (its empty final response repeats it)."""
        self._finish = finish
        """Reads a ``finish_reason`` output's raw bytes (the LLM-API model), else None."""
        self._block = block
        """Tokens per KV block: ``kv_cache_reused_blocks`` × this are cached prompt tokens."""

    def __call__(self, outputs: Outputs, raws: Sequence[bytes], final: bool) -> GenerationChunk:
        text = b""
        num_in: int | None = None
        num_out: int | None = None
        reason: str | None = None
        cached: int | None = None
        for (name, datatype), raw in zip(outputs, raws, strict=False):
            if name == "kv_cache_reused_blocks" and self._block is not None:
                cached = read_count(raw, datatype) * self._block
            elif name == "text_output":
                texts = split_bytes(raw)
                text = texts[0] if texts else b""
            elif name == "num_input_tokens":
                num_in = read_count(raw, datatype)
            elif name == "num_output_tokens":
                num_out = read_count(raw, datatype)
            elif name == "finish_reason" and self._finish is not None:
                reason = self._finish(raw)
        if self._strip is not None:
            if text.startswith(self._strip):
                text = text[len(self._strip) :]
            self._strip = None
        if self._cumulative:
            text = self._delta(text, final or reason is not None)
        if num_out is not None and self._subtract and num_in is not None:
            num_out = max(0, num_out - num_in)
        counts = None if num_out is None else (num_out,)
        if cached is not None and num_in is not None:
            cached = min(cached, num_in)
        return GenerationChunk((text,), (reason,), num_in, counts, None, final, None, cached)

    def _delta(self, whole: bytes, ending: bool) -> bytes:
        sent = self._sent
        if whole:
            self._whole = whole
        else:  # an empty response (a BLS's separate final) says nothing new
            whole = self._whole
        # Past what was sent, also where an earlier character resolved differently: what was sent
        # cannot be taken back.
        delta = whole[len(sent) :]
        if not ending:
            while delta.endswith(_REPLACEMENT):
                delta = delta[: -len(_REPLACEMENT)]
        self._sent = sent + delta
        return delta


class TextContract:
    """An ensemble or BLS model, built from its interface (see the module docstring)."""

    reports_prompt_tokens: bool
    reports_completion_tokens: bool

    def __init__(
        self,
        interface: ModelInterface,
        *,
        layout: str,
        cumulative: bool,
        echoes: bool,
        adapters: Mapping[str, LoraAdapter] | None = None,
        guided: bool = True,
        stop_step: tuple[str, ModelInterface] | None = None,
        kv_block_tokens: int | None = None,
    ) -> None:
        """``cumulative``: streamed text is the whole text so far (BLS ``accumulate_tokens``);
        ``echoes``: a whole answer starts with the prompt unless told otherwise (the LLM step's
        ``exclude_input_in_output`` parameter is not true); ``guided``: its engine enforces
        guided decoding; ``stop_step``: the ``tensorrt_llm`` step (name, interface) that a
        ``stop`` request ends a streamed request on, because a Triton cancel of an ensemble does
        not reach its steps (Triton 2.51: the step goes on to ``max_tokens``);
        ``kv_block_tokens``: the engine's KV block size, to report reused blocks as cached tokens."""
        self.layout = layout
        self.interface = interface
        self._cumulative = cumulative
        self._echoes = echoes and "exclude_input_in_output" not in interface.inputs
        self._adapters = dict(adapters or {})
        self.guided = guided
        self._block = kv_block_tokens if "return_perf_metrics" in interface.inputs else None
        self._stop_step = stop_step if stop_step is not None and "stop" in stop_step[1].inputs else None
        self.reports_prompt_tokens = "return_num_input_tokens" in interface.inputs
        self.reports_completion_tokens = "return_num_output_tokens" in interface.inputs

    def streams(self, request: GenerationRequest) -> bool:
        """Whether the backend is asked to stream: when the client streams, and only where the
        model is decoupled."""
        return request.stream and self.interface.decoupled and "stream" in self.interface.inputs

    def encode(self, request: GenerationRequest, *, lora_weights: bool = False) -> bytes:
        interface, layout = self.interface, self.layout
        infer = service_pb2.ModelInferRequest(model_name=request.model, id=request.request_id)
        add_priority(infer, request.priority)
        if interface.decoupled:
            # A BLS model ends with an empty FINAL response of its own, which Triton's stream
            # sends only when asked: without it, a cumulative text's last held-back bytes and the
            # end of the answer would wait for the call's end.
            infer.parameters["triton_enable_empty_final_response"].bool_param = True
        add_declared(infer, interface, "text_input", [request.prompt])
        sent = {"text_input"}
        if add_flag(infer, interface, "stream", self.streams(request)):
            sent.add("stream")
        for flag in ("exclude_input_in_output", "return_num_input_tokens", "return_num_output_tokens"):
            if add_flag(infer, interface, flag, True):
                sent.add(flag)
        if self._block is not None and add_flag(infer, interface, "return_perf_metrics", True):
            sent.add("return_perf_metrics")
        if request.sampling.get("logprobs") is not None:
            raise refuse(request, layout, "logprobs", "its text output carries no tokens to give log-probabilities of")
        add_scalars(infer, interface, request, layout, ENSEMBLE_FIELDS, _HANDLED)
        sent.update(i.name for i in infer.inputs)
        for name, values in (
            ("stop_words", request.sampling.get("stop")),
            ("bad_words", request.sampling.get("bad_words")),
        ):
            listed = words(values or ())
            if name not in interface.inputs:
                if listed and name == "bad_words":
                    raise refuse(request, layout, "bad_words")
                continue
            spec = interface.inputs[name]
            if not spec.optional:  # before v0.6: one comma-separated string, and required
                if name == "bad_words" and any("," in w for w in listed):
                    raise refuse(request, layout, "bad_words", "its bad words are one comma-separated string")
                add_declared(infer, interface, name, [",".join(w for w in listed if "," not in w)])
            elif listed:
                add_declared(infer, interface, name, listed)
            else:
                continue
            sent.add(name)
        add_guide(infer, interface, request, layout, self.guided)
        add_lora(infer, interface, request, layout, self._adapters, lora_weights)
        sent.update(i.name for i in infer.inputs)
        for name, spec in interface.inputs.items():
            if spec.optional or name in sent:
                continue
            if name not in _DEFAULTS:
                raise BackendError(
                    f"the model '{request.model}' requires the input '{name}', which the gateway cannot fill"
                )
            add_declared(infer, interface, name, _DEFAULTS[name])
        return bytes(infer.SerializeToString())

    def parser(self, request: GenerationRequest) -> TextReader:
        streaming = self.streams(request)
        echoed = self._echoes and not streaming
        return TextReader(
            cumulative=self._cumulative and streaming,
            strip=request.prompt.encode("utf-8") if echoed else None,
            subtract_prompt=echoed,
            block=self._block,
        )

    def plan(self, outputs: Outputs) -> ReadRaws | None:
        return None

    def uses_lora_task(self, request: GenerationRequest) -> int | None:
        return task_of(request, self._adapters)

    def stop_message(self, request: GenerationRequest) -> tuple[str, bytes] | None:
        if self._stop_step is None or not request.request_id:
            return None
        name, interface = self._stop_step
        return name, stop_request(name, interface, request.request_id)

    def migratable(self, request: GenerationRequest) -> GenerationRequest | None:
        return None if constrained(request) else request

    def continuation(self, request: GenerationRequest, produced: Produced) -> Continuation | None:
        return by_text(request, produced)
