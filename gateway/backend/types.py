"""Internal types between the planning layer and core, and a backend.

Plain frozen dataclasses, not pydantic: one ``GenerationChunk`` is built per backend response, on
the per-token path, so it must cost no validation. Nothing here knows OpenAI's wire format.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor a model declares in its Triton config: what a request must send it as."""

    name: str
    datatype: str
    """Triton's wire name (``INT32``, ``UINT32``, ``FP32``, ``BOOL``, ``BYTES``...), not the
    config's ``TYPE_*`` name."""
    dims: tuple[int, ...]
    """As declared, without the batch dimension a model with ``max_batch_size`` > 0 adds."""
    optional: bool = False


@dataclass(frozen=True, slots=True)
class ModelInterface:
    """A model's declared interface, read once per model from Triton's config: every tensor a
    request carries is built from it (name, type and shape), and whether the model may stream
    (decoupled) is its transaction policy, or for an ensemble its steps'."""

    inputs: Mapping[str, TensorSpec] = field(default_factory=dict)
    outputs: Mapping[str, TensorSpec] = field(default_factory=dict)
    decoupled: bool = False
    max_batch_size: int = 0
    """> 0: every tensor has a leading batch dimension (the gateway sends a batch of one)."""
    platform: str = ""
    """Triton's ``backend`` (else ``platform``): ``vllm``, ``python``, ``tensorrtllm``, ``ensemble``."""
    parameters: Mapping[str, str] = field(default_factory=dict)
    """The config's ``parameters`` (string values), where TensorRT-LLM models say how they behave
    (``accumulate_tokens``, ``tokenizer_dir``, ``exclude_input_in_output``...)."""
    steps: tuple[str, ...] = ()
    """An ensemble's step models, in the order its scheduling lists them."""
    priority_levels: int = 0
    """The priority levels of Triton's queue for the model (``dynamic_batching.priority_levels``;
    0: none, a request's ``priority`` is ignored). An ensemble has no queue of its own but passes
    a request's priority on to its steps: its levels are the most any of its steps declares."""
    default_priority_level: int = 0
    """The level of a request that names none (``dynamic_batching.default_priority_level``)."""

    def shape(self, spec: TensorSpec, count: int = 1) -> list[int]:
        """The shape of a tensor of ``count`` elements (one batch item)."""
        dims = [count if d == -1 else d for d in spec.dims] or [1]
        if len(dims) > 1 and count != 1:  # a [-1, -1] tensor of a list: the last dim holds it
            dims = [1] * (len(dims) - 1) + [count]
        return [1, *dims] if self.max_batch_size > 0 else dims


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One generation call: a prompt and vLLM-style sampling parameters for one backend model."""

    request_id: str
    model: str
    prompt: str
    sampling: Mapping[str, Any]
    """vLLM ``SamplingParams`` fields (plus ``lora_name``), already validated; sent as JSON."""
    stream: bool = True
    """Ask the backend for deltas (True) or one response with the full text (False)."""
    return_logprobs: bool = False
    deadline: float | None = None
    """``time.monotonic()`` at which the backend call is cancelled; None for no deadline."""
    inputs: frozenset[str] = frozenset()
    """The model's declared input tensors (the vLLM contract reads which flags it can send)."""
    contract: Any = None
    """The backend contract that encodes the request and reads its responses
    (``contracts.Contract``, chosen from the model's declared interface); None: the vLLM
    backend's."""
    tokens: TokenPrompt | None = None
    """The prompt as token ids, for a model that takes tokens rather than text (TensorRT-LLM's
    ``tensorrt_llm`` model)."""
    images: tuple[str, ...] = ()
    """Base64 image files, checked by planning, in the order the prompt refers to them: Triton's
    vLLM backend takes them as its ``image`` input."""
    session_key: str | None = None
    """What ties the request to earlier ones (a conversation): requests with one key go to one
    replica, where its prefix is cached. None: the prompt's prefix, or load, decides."""
    placement: Placement | None = None
    """Filled by the replica pool with where the request went, for the response headers and log."""
    priority: int = 0
    """The Triton priority level to send (the request's ``priority`` parameter: 1 is the most
    urgent), from its band and the model's levels (``plan.priority.triton_priority``); 0 sends
    none, and the request waits at the model's default level."""
    return_token_ids: bool = False
    """Ask for the generated token ids beside the text, where the model can give them (its
    ``return_token_ids`` input): the replica pool asks when it may have to continue the stream
    on another replica."""
    resume_ids: tuple[int, ...] = ()
    """Tokens this request already generated on a replica that failed mid-stream: a model that
    declares ``resume_token_ids`` replays them as its own output and goes on from there (an exact
    continuation, ``contracts/continuation.py``)."""


@dataclass(frozen=True, slots=True)
class TokenPrompt:
    """A prompt already tokenized by the gateway, with the ids the model needs beside it."""

    ids: tuple[int, ...]
    end_id: int
    pad_id: int
    stop_words: tuple[tuple[int, ...], ...] = ()
    """Each stop string's ids, tokenized alone without special tokens (as TensorRT-LLM's
    preprocessing does): the engine stops early; the gateway still cuts the text itself."""
    bad_words: tuple[tuple[int, ...], ...] = ()


@dataclass(slots=True)
class Produced:
    """What one generation has received so far, across every replica it ran on: what a
    continuation on another replica is built from. Filled by the replica pool's stream."""

    text: bytearray = field(default_factory=bytearray)
    """The generated text's bytes, as received (a multi-byte character may be cut at the end)."""
    ids: list[int] = field(default_factory=list)
    """The generated token ids, where the backend sent them (``ids_known``)."""
    tokens: int = 0
    """Generated tokens as the backend counted them (``num_output_tokens``), else ``len(ids)``."""
    ids_known: bool = True
    """Every chunk so far carried its token ids (else ``ids`` is not the whole output)."""
    counted: bool = True
    """Every chunk so far carried its token count (else ``tokens`` is not the whole output)."""
    prompt_tokens: int | None = None
    """The prompt's count as the first replica reported it (the client's prompt, once)."""

    def add(self, batch: Sequence[GenerationChunk]) -> None:
        """Per batch of a stream that may move: kept to a few tests and appends (a token's cost)."""
        for text, _, num_in, counts, _, _, ids, _ in batch:
            if self.prompt_tokens is None:
                self.prompt_tokens = num_in
            said = text[0] if text else b""
            self.text += said
            if ids is not None:
                self.ids += ids[0]
            elif said:
                self.ids_known = False
            if counts:
                self.tokens += counts[0]
            elif ids is not None:
                self.tokens += len(ids[0])
            elif said:
                self.counted = False


class Placement:
    """Where one generation was placed: written once by the backend, read by the HTTP edge."""

    __slots__ = ("replica", "route")

    def __init__(self) -> None:
        self.replica: str | None = None
        self.route: str | None = None


class GenerationChunk(NamedTuple):
    """One backend response. Every tuple has one element per sequence (``n``).

    A NamedTuple rather than a frozen dataclass: one is built per token, and a frozen dataclass's
    ``__init__`` (``object.__setattr__`` per field) showed up in the profile."""

    text: tuple[bytes, ...]
    """Raw UTF-8 bytes: the delta since the previous chunk when streaming, else the full text.
    A multi-byte character may be split across two chunks."""
    finish_reason: tuple[str | None, ...]
    """None while the sequence goes on; then ``stop``, ``length`` or ``abort``."""
    num_input_tokens: int | None = None
    num_output_tokens: tuple[int, ...] | None = None
    """Tokens added since the previous chunk (sum them), when the backend reports it."""
    logprobs: tuple[Any, ...] | None = None
    """Per sequence, the backend's per-token logprob entries for this chunk (parsed JSON)."""
    final: bool = False
    token_ids: tuple[tuple[int, ...], ...] | None = None
    """Per sequence, the token ids new in this chunk, from a model that answers tokens (then
    ``text`` is empty and the core detokenizes them, ``core/detokenize.py``)."""
    cached_tokens: int | None = None
    """Prompt tokens the engine found in its KV cache (reused blocks), when it says."""


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    """One input to embed: one backend call, answered with one vector."""

    request_id: str
    model: str
    input: str | Sequence[int]
    """The text, or its token ids (already checked against the vocabulary)."""
    dimensions: int | None = None
    """Matryoshka output size; None: the model's own."""
    deadline: float | None = None
    inputs: frozenset[str] = frozenset()
    """The model's declared input tensors (a vLLM-backend model requires ``text_input`` too)."""


@dataclass(frozen=True, slots=True)
class Embedding:
    """What the backend answered for one input."""

    vector: list[float]
    prompt_tokens: int | None
    """Tokens the model read (``num_input_tokens``), when the backend reports it."""


@dataclass(frozen=True, slots=True)
class BackendModel:
    """A model the backend serves and is ready to run."""

    name: str
    version: str = ""
    platform: str = ""
    inputs: frozenset[str] = field(default_factory=frozenset)
    interface: ModelInterface | None = None
    """The model's declared interface (None: not read, as in tests' fake backends)."""


class GenerationStream(Protocol):
    """One generation's batches of chunks, as ``Backend.generate`` returns them: an async
    iterator the consumer must ``aclose`` once it is done with it, whether the stream ended, failed
    or was left early. Closing is what frees what the generation holds (its call, its replica's
    in-flight count), and what cancels the backend's work if it is still going. An async generator
    is one (``error`` aside); the gateway's own are plain objects, so that a token's wake-up does
    not resume a generator frame per layer."""

    error: BaseException | None
    """What the stream raised when it failed, None while it has not: the replica pool reads it on
    closing, to eject a replica that became unreachable mid-stream."""

    def __aiter__(self) -> GenerationStream: ...

    def __anext__(self) -> Awaitable[list[GenerationChunk]]: ...

    def aclose(self) -> Awaitable[None]: ...


class Backend(Protocol):
    """What the gateway needs from an inference server. ``TritonBackend`` is the real one."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def server_ready(self) -> bool: ...

    async def list_models(self) -> list[BackendModel]: ...

    def abort_all(self, error: Exception) -> int:
        """Cancel every generation in flight; each raises ``error`` to its consumer."""
        ...

    async def embed(self, request: EmbeddingRequest) -> Embedding:
        """One input's pooled vector: one call, cancelled if the awaiting task is."""
        ...

    def generate(self, request: GenerationRequest) -> GenerationStream:
        """Batches of chunks until the backend's final one: each batch is everything that
        arrived since the consumer last asked, so a consumer busy writing to a slow client takes
        the pile at once. Nothing is sent before the first ``__anext__``."""
        ...
