"""The bodies of ``POST /tokenize`` and ``POST /detokenize``, in vLLM's shapes. No backend imports.

vLLM takes two tokenize bodies (``TokenizeCompletionRequest`` with ``prompt``,
``TokenizeChatRequest`` with ``messages``) as a union; here one model holds both and planning
(``plan/tokenize.py``) checks that exactly one of the two is given, so the 400 names the field
rather than listing every member's mismatch. Unknown fields are ignored, ``null`` means unset.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field

from gateway.plan.nullable import NullMeansDefault
from gateway.plan.requests import ChatMessage

_LENIENT = ConfigDict(extra="allow", populate_by_name=True)


class TokenizeRequest(NullMeansDefault):
    """``POST /tokenize``: a completions ``prompt`` or chat ``messages``."""

    model_config = _LENIENT
    model: str | None = Field(default=None, min_length=1)
    """Unset: the one model the gateway serves (as vLLM takes its one model)."""
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None
    """Unset: as the generation's prompt is tokenized, special tokens added (see ``plan/tokenize.py``)."""
    return_token_strs: bool = False
    # chat only, as on chat completions
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    """Not in vLLM's body: as chat's, so a count can be of a chat with a forced or no tool choice."""
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    documents: list[dict[str, str]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    """Options of vLLM's multimodal processor: accepted and unused, since the tokens an image takes
    are the backend's processor's to decide and are not counted here (``plan.tokenize.to_chat_request``)."""
    media_io_kwargs: dict[str, Any] | None = None
    """Options for loading media: accepted and unused (image URLs are fetched under the operator's
    rules, ``images.fetch``, for chat only)."""


class DetokenizeRequest(NullMeansDefault):
    """``POST /detokenize``: token ids back to text."""

    model_config = _LENIENT
    model: str | None = Field(default=None, min_length=1)
    tokens: list[Annotated[int, Field(ge=0, le=2**63 - 1)]]
    """Ids below the model's vocabulary size (checked in planning, which knows the tokenizer)."""
