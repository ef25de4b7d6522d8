"""Whether a chat request's output is split into reasoning and answer, and how. Pure.

The model's reasoning parser (``ServedModel.reasoning_parser``: set per model, or detected from its
chat template) applies unless the request turns it off:

- the rendered prompt decides first where it can (``ReasoningSpec.from_prompt``): a prompt that
  ends inside an open ``<think>`` (Qwen3.5, Qwen3-2507 thinking, GLM-4.5+ with thinking on) makes
  the output start inside the reasoning, whatever the parser's default; a prompt that ends with a
  closed block (the same templates with ``enable_thinking: false``) gets no split, since the
  model answers plainly;
- else a parser with a switch (``deepseek_v3``: the template's ``thinking`` variable) applies
  only when ``chat_template_kwargs`` sets it true, since the model then answers without reasoning;
- output constrained by structured outputs (``response_format``, vLLM's ``structured_outputs``,
  a forced ``tool_choice``) is the constrained answer from its first token on Triton's backends,
  so there is no reasoning to split, unless the model's ``model_files`` entry says the backend's
  structured outputs start after the reasoning (``structured_outputs_after_reasoning``: vLLM
  engines configured with a reasoning parser for structured outputs).

``include_reasoning: false`` keeps the split and drops the reasoning, as vLLM does. Legacy
completions are never split (vLLM's ``/v1/completions`` has no reasoning parser either): their
text, a prompt ending in ``<think>`` or not, is the answer as generated.
"""

from __future__ import annotations

from gateway.core.generation_plan import ReasoningPlan
from gateway.models.catalog import ServedModel
from gateway.plan.requests import ChatCompletionRequest
from gateway.reasoning.prompt import PromptReasoning
from gateway.reasoning.registry import REASONING_PARSERS


def plan_reasoning(
    request: ChatCompletionRequest, model: ServedModel, *, prompt: str, constrained: bool, calls: bool
) -> ReasoningPlan | None:
    """``prompt``: the rendered prompt; ``calls``: the request reads tool calls from the answer
    (``plan/tools.py`` said so)."""
    name = model.reasoning_parser
    if name is None:
        return None
    if constrained and not model.structured_outputs_after_reasoning:
        return None
    spec = REASONING_PARSERS[name]
    where = spec.from_prompt(prompt)
    if where is PromptReasoning.CLOSED:
        return None
    if where is None and spec.switch is not None and not (request.chat_template_kwargs or {}).get(spec.switch):
        return None
    return ReasoningPlan(name, include=request.include_reasoning, calls=calls, opened=where is PromptReasoning.OPEN)


def needs_special_tokens(plan: ReasoningPlan | None) -> bool:
    """The parser's markers are special tokens that the default decode would remove."""
    return plan is not None and REASONING_PARSERS[plan.parser].needs_special_tokens
