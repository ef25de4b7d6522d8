"""What the core runs: one request, decided by planning (``gateway.plan``) before Triton is called.

The types live here, under the core, because the core reads them and planning builds them: the
arrows point down (docs/ARCHITECTURE.md). Plain frozen dataclasses, built once per request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.backend.types import GenerationRequest
from gateway.core.schedule import Claim
from gateway.tools.params import ToolParams

FORCED_NAMED = "forced_named"
FORCED_REQUIRED = "forced_required"


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """How one request's output is read for tool calls."""

    parser: str
    """A ``gateway.tools`` parser name: the model's format for ``auto``, or a forced one."""
    tool_names: frozenset[str]
    parallel: bool
    """False: only the first call of a choice is kept (``parallel_tool_calls: false``)."""
    forced_name: str | None = None
    """The function a named ``tool_choice`` forces (its output is that function's arguments)."""
    legacy_functions: bool = False
    """The request used ``functions``: the call is answered as ``function_call`` (OpenAI's
    deprecated shape, finish reason ``function_call``), not as ``tool_calls``."""
    params: ToolParams = ()
    """The tools' parameter types, for a parser whose format writes values as bare text
    (``ParserSpec.typed``); empty for the others. A tuple, so the plan stays hashable."""


@dataclass(frozen=True, slots=True)
class ReasoningPlan:
    """How one request's output is split into reasoning and answer."""

    parser: str
    """A ``gateway.reasoning`` parser name."""
    include: bool = True
    """False (``include_reasoning: false``): the reasoning is dropped, not sent."""
    calls: bool = False
    """The request reads tool calls from the answer: a parser whose format carries calls passes
    them on (harmony), instead of dropping them."""
    opened: bool = False
    """The rendered prompt ended inside the reasoning (a template that opens ``<think>`` in the
    generation prompt): the output starts inside it. Decided once, when the plan is made."""


@dataclass(frozen=True, slots=True)
class Detokenizing:
    """The tokenizer that turns a backend's token ids into each choice's text."""

    tokenizer: Any
    """A ``tokenizers.Tokenizer``."""
    skip_special_tokens: bool = True


@dataclass(frozen=True, slots=True)
class GenerationPlan:
    """One request, decided: a backend request per choice, and how to assemble and answer."""

    requests: tuple[GenerationRequest, ...]
    """One single-sequence request per choice, in choice order: prompt position × ``n`` + i."""
    request_id: str
    chat: bool
    stream: bool
    model_id: str
    """The id the client asked for (a base model or ``<base><sep><adapter>``), echoed back."""
    adapter: str | None
    completion_id: str
    """The answer's id: ``chatcmpl-…``/``cmpl-…``, or the Responses API's ``resp_…`` (its trace's
    ``gen_ai.response.id`` too)."""
    created: int
    n: int
    """Choices per prompt."""
    stops: tuple[str, ...]
    include_stop: bool
    max_tokens: tuple[int, ...]
    """Per prompt."""
    include_usage: bool
    continuous_usage: bool
    logprobs: int | None = None
    """Top-k alternatives asked for (0: only the sampled token); None: no logprobs."""
    token_ids: bool = False
    """Logprob tokens named ``token_id:<id>`` rather than by their text (vLLM's
    ``return_tokens_as_token_ids``)."""
    echo: tuple[str, ...] | None = None
    """Legacy completions with ``echo``: each prompt's text, shown before its completion."""
    prompt_tokens: tuple[int | None, ...] = ()
    """The gateway's own count per prompt: usage when the backend reports none (TensorRT-LLM).
    None where counting could change nothing (``plan/budget.py``): the backend reports it."""
    deadline: float | None = None
    tools: ToolPlan | None = None
    """How each choice's text is read for tool calls; None: plain text."""
    reasoning: ReasoningPlan | None = None
    """How each choice's text is split into reasoning and answer (before tool calls are read
    from the answer); None: all of it is the answer."""
    api: str | None = None
    """The endpoint, when it is not the one ``chat`` says (``responses``, ``messages``: a chat plan
    in another API)."""
    served_model: str | None = None
    """The base model's name, when the requests go to another Triton model (a TensorRT-LLM
    ensemble's ``tensorrt_llm`` step)."""
    detokenize: Detokenizing | None = None
    """How token ids from the backend become text (a model that answers tokens); None: it
    answers text."""
    claim: Claim = Claim()
    """Its band, flow and expected size, for the scheduler (``plan/priority.py``)."""
    count_completion: Callable[[str], int] | None = None
    """Counts a choice's generated tokens from its text where the backend's answers carry no
    token counts (TensorRT-LLM layouts that report none); None: only the backend's counts."""

    @property
    def model(self) -> str:
        """The base model's name: admission's gate and the metrics' label."""
        return self.served_model or self.requests[0].model

    @property
    def endpoint(self) -> str:
        """The metrics' and the request log's ``endpoint`` label."""
        if self.api is not None:
            return self.api
        return "chat" if self.chat else "completions"

    @property
    def choices(self) -> int:
        """Choices in the response: ``n`` per prompt, one backend request each."""
        return len(self.requests)
