"""Anthropic's Messages API request (``POST /v1/messages``, ``/v1/messages/count_tokens``), with
Anthropic's names. No backend imports.

Validated once at the edge, like the chat request. The top-level fields are typed here; the
content blocks of ``system`` and ``messages``, ``tools`` and ``tool_choice`` stay plain JSON and are
read block by block in ``plan/messages.py``, which names the exact offending field
(``messages.1.content.0.type``) where a union of models would report every member's mismatch.
Unknown fields are ignored, as on chat; ``null`` means unset (``nullable.NullMeansDefault``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.plan.nullable import NullMeansDefault

_LENIENT = ConfigDict(extra="allow", populate_by_name=True)

MIN_THINKING_BUDGET = 1024
"""Anthropic's smallest ``thinking.budget_tokens``."""


class AnthropicMessage(BaseModel):
    """One turn: a string, or a list of content blocks (``text``, ``image``, ``tool_use``,
    ``tool_result``, ``thinking``). ``system``: an instruction in the middle of the conversation
    (Claude Code sends its environment so)."""

    model_config = _LENIENT
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class Thinking(BaseModel):
    """``{"type": "enabled", "budget_tokens": N}``, ``{"type": "adaptive"}`` (the model decides,
    no budget) or ``{"type": "disabled"}``. ``display``: ``omitted`` gives empty thinking blocks
    whose ``signature`` still carries the thinking for the next turn; any other value
    (``summarized``, ``updates``...) the thinking's text (these models write no summary, so it is
    the text itself)."""

    model_config = _LENIENT
    type: Literal["enabled", "adaptive", "disabled"]
    budget_tokens: int | None = Field(default=None, le=2**31 - 1)
    display: str | None = None
    """Any value but ``omitted`` shows the text (Claude Code streams with ``updates``)."""

    @property
    def on(self) -> bool:
        return self.type != "disabled"


class OutputConfig(NullMeansDefault):
    """``output_config``: ``effort`` (reaches the template as chat's ``reasoning_effort``) and
    ``format`` (a JSON schema the answer follows, as chat's ``response_format``)."""

    model_config = _LENIENT
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: dict[str, Any] | None = None


class ContextManagement(NullMeansDefault):
    """``context_management``: the edits applied to the conversation before it is rendered
    (``plan/context_edits.py``)."""

    model_config = _LENIENT
    edits: list[dict[str, Any]] = Field(default_factory=list)


class Metadata(NullMeansDefault):
    model_config = _LENIENT
    user_id: str | None = Field(default=None, max_length=256)


class MessagesCountRequest(NullMeansDefault):
    """``POST /v1/messages/count_tokens``: what shapes the prompt, without the sampling."""

    model_config = _LENIENT
    model: str = Field(min_length=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    context_management: ContextManagement | None = None


class MessagesRequest(MessagesCountRequest):
    """``POST /v1/messages``. ``top_k`` is vLLM's sampling field of the same name."""

    max_tokens: int = Field(ge=1, le=2**31 - 1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1, le=2**31 - 1)
    metadata: Metadata | None = None
    stream: bool = False
