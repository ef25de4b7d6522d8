"""Reasoning parser names (vLLM's ``--reasoning-parser`` names) and detection from a chat template.

``REASONING_PARSERS[name]`` is a ``ReasoningSpec``: call it for a fresh parser for one choice.
``needs_special_tokens``: the markers are special tokens in the model's tokenizer (Magistral's
``[THINK]``, harmony's ``<|channel|>``), which the default ``skip_special_tokens=True`` decode
removes before the parser could see them; the request then decodes with them, and the parser
keeps them from the client. ``<think>`` is an ordinary added token in Qwen's and DeepSeek's
tokenizers.

``prompt_markers``: the markers whose place at the rendered prompt's end decides, per request,
whether the output starts inside the reasoning (``reasoning.prompt``); the ``<think>`` family's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gateway.reasoning.harmony import HarmonyReasoningParser
from gateway.reasoning.prompt import PromptReasoning, prompt_reasoning
from gateway.reasoning.tags import TagReasoningParser
from gateway.reasoning.types import ReasoningParser

THINK = ("<think>",)
UNTHINK = ("</think>",)


@dataclass(frozen=True, slots=True)
class ReasoningSpec:
    """A parser factory with the facts the planner needs about its format."""

    name: str
    factory: Callable[[bool, bool], ReasoningParser]
    """Takes ``calls``: whether the request reads tool calls (the ``openai`` parser passes calls
    on to the tool-call parser then, and drops them otherwise), and ``opened``: the prompt left
    the reasoning open, so the output starts inside it (``from_prompt``)."""
    needs_special_tokens: bool
    families: str
    markers: str
    switch: str | None = None
    """A chat-template variable that turns thinking on (``chat_template_kwargs``); when set, a
    request that does not set it true gets no reasoning parser: the model answers plainly (unless
    its prompt opens the reasoning)."""
    prompt_markers: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    """(opening, closing) markers a chat template may end the prompt with; None: the format's
    prompts never open or close its reasoning."""

    def __call__(self, calls: bool = False, opened: bool = False) -> ReasoningParser:
        return self.factory(calls, opened)

    def from_prompt(self, prompt: str) -> PromptReasoning | None:
        """Where the rendered prompt leaves the reasoning; None when it does not say."""
        if self.prompt_markers is None:
            return None
        return prompt_reasoning(prompt, *self.prompt_markers)


_SPECS = (
    ReasoningSpec(
        "deepseek_r1",
        lambda calls, opened: TagReasoningParser(THINK, UNTHINK, implicit=True),
        needs_special_tokens=False,
        families="DeepSeek-R1 and its distills, QwQ, Qwen3 thinking-only releases (2507): "
        "templates that open <think> in the prompt",
        markers="reasoning…</think>answer (a leading <think> optional); a prompt ending in a closed block: all answer",
        prompt_markers=(THINK, UNTHINK),
    ),
    ReasoningSpec(
        "deepseek_v3",
        lambda calls, opened: TagReasoningParser(THINK, UNTHINK, implicit=True),
        needs_special_tokens=False,
        families="DeepSeek V3.1, V3.2 (hybrid: chat_template_kwargs thinking true)",
        markers="as deepseek_r1 with thinking on (or a prompt ending in <think>); plain answers otherwise",
        switch="thinking",
        prompt_markers=(THINK, UNTHINK),
    ),
    ReasoningSpec(
        "qwen3",
        lambda calls, opened: TagReasoningParser(THINK, UNTHINK, implicit=opened),
        needs_special_tokens=False,
        families="Qwen3 (hybrid thinking, enable_thinking), Qwen3.5, GLM-4.5+, Kimi K2 thinking, MiniMax M2",
        markers="<think>reasoning</think>answer; after a prompt ending in <think> (Qwen3.5, GLM-4.5+), "
        "reasoning…</think>answer; after a prompt ending in a closed block, all answer; else output not "
        "opening with <think> has no reasoning",
        prompt_markers=(THINK, UNTHINK),
    ),
    ReasoningSpec(
        "mistral",
        lambda calls, opened: TagReasoningParser(("[THINK]",), ("[/THINK]",), implicit=False),
        needs_special_tokens=True,
        families="Magistral Small and Medium (1.2+)",
        markers="[THINK]reasoning[/THINK]answer",
    ),
    ReasoningSpec(
        "granite",
        lambda calls, opened: TagReasoningParser(
            ("Here is my thought process:", "Here's my thought process:"),
            ("Here is my response:", "Here's my response:"),
            implicit=False,
        ),
        needs_special_tokens=False,
        families="IBM Granite 3.2+ with thinking on",
        markers="Here is my thought process: … Here is my response: …",
    ),
    ReasoningSpec(
        "openai",
        lambda calls, opened: HarmonyReasoningParser(calls),
        needs_special_tokens=True,
        families="gpt-oss (OpenAI's harmony format)",
        markers="<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…",
    ),
)

REASONING_PARSERS: Mapping[str, ReasoningSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})


def make_reasoning_parser(name: str, *, calls: bool = False, opened: bool = False) -> ReasoningParser:
    """A fresh parser for one choice. KeyError for an unknown name (settings check names at start).
    ``opened``: the prompt ended inside the reasoning (``ReasoningSpec.from_prompt``)."""
    return REASONING_PARSERS[name](calls, opened)


_CLOSES_IN_PROMPT = re.compile(r"Assistant｜></think>")
"""DeepSeek V3.1's prompt closes the reasoning at once when ``thinking`` is off."""


def detect_reasoning_parser(template_source: str) -> str | None:
    """The reasoning parser a chat template's own markers call for, or None (no reasoning format).

    1. harmony's ``<|channel|>`` → ``openai`` (gpt-oss).
    2. ``[THINK]`` → ``mistral`` (Magistral).
    3. Granite's "thought process" prompt → ``granite``.
    4. Templates that speak of ``<think>``: with ``enable_thinking`` (Qwen3, Qwen3.5, GLM-4.5+)
       → ``qwen3`` (whether a request's output starts inside the reasoning is read from its
       rendered prompt, ``ReasoningSpec.from_prompt``); a prompt that closes the reasoning when
       ``thinking`` is off (DeepSeek V3.1+) → ``deepseek_v3``; any other (a generation prompt
       that opens ``<think>``, DeepSeek-R1's history cleaning) → ``deepseek_r1``.
    """
    source = template_source
    if "<|channel|>" in source:
        return "openai"
    if "[THINK]" in source:
        return "mistral"
    if "my thought process" in source:
        return "granite"
    if "</think>" in source or "<think>" in source:
        if "enable_thinking" in source:
            return "qwen3"
        if _CLOSES_IN_PROMPT.search(source):
            return "deepseek_v3"
        return "deepseek_r1"
    return None
