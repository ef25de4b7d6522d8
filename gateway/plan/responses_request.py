"""The Responses API's request (``POST /v1/responses``), with OpenAI's names. No backend imports.

Validated once at the edge, like the chat request. The top-level fields are typed here; the
``input`` items, ``tools`` and ``tool_choice`` stay plain JSON and are checked item by item in
``plan/responses.py``, which names the exact offending field (``input.2.content.0.type``) where a
union of models would report every member's mismatch. Fields of OpenAI's API that the gateway
cannot honour (``prompt``, ``conversation``...) are declared so that planning can
refuse them by name rather than let them pass as unknown extras; unknown fields are ignored, as on
chat. ``null`` means unset everywhere (``nullable.NullMeansDefault``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.plan.nullable import NullMeansDefault
from gateway.plan.requests import ReasoningEffort, SamplingExtras

_LENIENT = ConfigDict(extra="allow", populate_by_name=True)

METADATA_PAIRS = 16
METADATA_KEY_CHARS = 64
METADATA_VALUE_CHARS = 512


class TextFormat(BaseModel):
    """``text.format``: plain text, JSON mode, or a JSON schema (flat, unlike chat's
    ``response_format.json_schema``)."""

    model_config = _LENIENT
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    """``schema`` would shadow a BaseModel attribute."""
    description: str | None = None
    strict: bool | None = None


class TextConfig(BaseModel):
    model_config = _LENIENT
    format: TextFormat | None = None
    verbosity: str | None = None


class Reasoning(BaseModel):
    """``reasoning``: ``effort`` reaches the chat template as chat's ``reasoning_effort`` does;
    ``summary`` asks for summaries of reasoning output, of which these models give none: echoed."""

    model_config = _LENIENT
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesRequest(SamplingExtras):
    """``POST /v1/responses``. ``SamplingExtras`` brings ``seed``, the penalties, ``stop`` and vLLM's
    extensions, passed on as on chat."""

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    client_metadata: dict[str, Any] | None = None
    """Free-form data about the client (the Codex CLI sends its turn ids): accepted, not echoed."""
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = Field(default=None, min_length=1)
    truncation: Literal["auto", "disabled"] | None = None
    max_tool_calls: int | None = Field(default=None, ge=1)
    """Bounds calls to built-in tools, of which the gateway has none: accepted and echoed."""
    include: list[str] | None = None
    reasoning: Reasoning | None = None
    background: bool | None = None
    """Run the response in a task of the gateway's, detached from this request: answered at once
    ``queued``, then polled, streamed again or cancelled by id (``http.background_answer``)."""
    # Declared to be refused by name when set (``plan/responses.py``).
    top_logprobs: int | None = None
    prompt: Any = None
    conversation: Any = None

    @field_validator("metadata")
    @classmethod
    def _metadata_bounds(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        """OpenAI's bounds: at most 16 pairs, keys of 64 characters, values of 512."""
        if value is None:
            return value
        if len(value) > METADATA_PAIRS:
            raise ValueError(f"at most {METADATA_PAIRS} metadata pairs are allowed")
        for key, item in value.items():
            if len(key) > METADATA_KEY_CHARS:
                raise ValueError(f"metadata keys are at most {METADATA_KEY_CHARS} characters, got {len(key)}")
            if len(item) > METADATA_VALUE_CHARS:
                raise ValueError(f"metadata values are at most {METADATA_VALUE_CHARS} characters, got {len(item)}")
        return value


class InputTokensRequest(NullMeansDefault):
    """``POST /v1/responses/input_tokens``: the fields of a Responses request that shape its input.
    Planned as the ``ResponsesRequest`` they belong to (``as_responses_request``), so its count is
    that request's ``usage.input_tokens``."""

    model_config = _LENIENT
    model: str | None = Field(default=None, min_length=1)
    """Unset: the one model the gateway serves."""
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    conversation: Any = None
    reasoning: Reasoning | None = None
    text: TextConfig | None = None
    truncation: Literal["auto", "disabled"] | None = None
    personality: str | None = None
    """A style preset of OpenAI's own models; these models have none, so it changes nothing."""

    def as_responses_request(self, model: str) -> ResponsesRequest:
        fields = {name: getattr(self, name) for name in self.model_fields_set if name in ResponsesRequest.model_fields}
        fields.update(model=model, input=self.input if self.input is not None else [], store=False)
        return ResponsesRequest.model_validate(fields)
