"""What every backend contract is: how one layout's requests are encoded and its responses read.

A contract is built once per model, from the model's declared interface (``ModelInterface``), and
put on each ``GenerationRequest`` by planning; the Triton client only asks it for a request's
bytes and for a reader of that request's responses. Readers may keep state for one call (a
cumulative text turned into deltas), so one is made per call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.backend.contracts.continuation import Continuation
from gateway.backend.contracts.tensors import Outputs, ReadRaws
from gateway.backend.types import GenerationChunk, GenerationRequest, Produced

ParseOutputs = Callable[[Outputs, Sequence[bytes], bool], GenerationChunk]
"""One response's output descriptors, raw contents and final flag → a chunk."""


class Contract(Protocol):
    """One model layout's tensor contract."""

    layout: str
    """``vllm``, ``ensemble``, ``bls``, ``tensorrt_llm`` or ``llmapi``."""
    reports_prompt_tokens: bool
    """Whether its responses carry the prompt's token count (else planning counts it)."""
    reports_completion_tokens: bool
    """Whether its responses carry generated token counts (else the core counts the text)."""

    def encode(self, request: GenerationRequest, *, lora_weights: bool = False) -> bytes:
        """The serialized ``ModelInferRequest``; ``lora_weights``: send the adapter's weights
        with its id (first use, or the backend said its cache lost them)."""
        ...

    def parser(self, request: GenerationRequest) -> ParseOutputs:
        """A reader of this request's responses (fresh state per call)."""
        ...

    def plan(self, outputs: Outputs) -> ReadRaws | None:
        """A faster reading of one output layout, where the contract has one."""
        ...

    def uses_lora_task(self, request: GenerationRequest) -> int | None:
        """The LoRA task id the request runs with, when its adapter's weights travel by id."""
        ...

    def stop_message(self, request: GenerationRequest) -> tuple[str, bytes] | None:
        """A request that stops ``request`` where cancelling its call does not (the model to send
        it to, its bytes); None where cancelling the call is enough."""
        ...

    def migratable(self, request: GenerationRequest) -> GenerationRequest | None:
        """``request`` as sent where its stream may have to go on on another replica (asking for
        the generated ids where the model gives them); None: it could not be continued."""
        ...

    def continuation(self, request: GenerationRequest, produced: Produced) -> Continuation | None:
        """What continues ``request`` (as ``migratable`` returned it) on another replica, after it
        produced ``produced``; None: it cannot be continued (``contracts/continuation.py``)."""
        ...
