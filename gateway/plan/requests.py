"""The OpenAI request bodies planning reads: wire models with OpenAI's names. No backend imports.

They live in the planning layer because a body's shape is its first check: every 4xx about
content, the schema's included, is planning's. The HTTP edge validates a body against them once;
responses are never models (``gateway.openai`` encodes them as bytes: they sit on the per-token
path). Unknown fields are kept (``extra="allow"``) and ignored:
OpenAI adds fields often and clients send vLLM-style extras through ``extra_body``; answering
those with 422 is the most reported failure of peer gateways. A ``null`` means "unset" on every
optional field (``nullable.NullMeansDefault``), as OpenAI's spec has it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.plan.nullable import NullMeansDefault

_LENIENT = ConfigDict(extra="allow", populate_by_name=True)

# The largest count or token id a backend's int32 tensor (or JSON parameter read as one) carries: a
# larger number is a 400 here, where an int64 overflow in the request's encoding would be a 500.
INT32_MAX = 2**31 - 1


class TextContentPart(BaseModel):
    model_config = _LENIENT
    type: Literal["text"]
    text: str


class OtherContentPart(BaseModel):
    """Image, audio, file and refusal parts: parsed so they can be rejected with a clear message."""

    model_config = _LENIENT
    type: str


ContentPart = TextContentPart | OtherContentPart


class ChatMessage(BaseModel):
    model_config = _LENIENT
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning: str | None = None
    """An assistant turn's reasoning sent back (interleaved thinking); vLLM's name since 0.11."""
    reasoning_content: str | None = None
    """The same under its earlier name, which many clients still send."""


class StreamOptions(NullMeansDefault):
    model_config = _LENIENT
    include_usage: bool = False
    continuous_usage_stats: bool = False


class ResponseFormat(BaseModel):
    model_config = _LENIENT
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class StructuredOutputs(BaseModel):
    """vLLM's ``structured_outputs`` extra (its ``StructuredOutputsParams``), sent through ``extra_body``.

    Exactly one constraint is allowed (checked in ``plan/validate.py``, with the field named). vLLM's
    options beside them (``disable_any_whitespace``, ``structural_tag``...) are kept and passed on:
    whether the backend can honour one is the backend's answer, not a guess made here."""

    model_config = _LENIENT
    json_: dict[str, Any] | str | None = Field(default=None, alias="json")
    """A JSON schema (object, or a string holding one); ``json`` would shadow a BaseModel method."""
    json_object: bool | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None

    def constraints(self) -> list[str]:
        """The constraints set, by vLLM's names (``json_object: false`` is none)."""
        values = {
            "json": self.json_,
            "json_object": self.json_object or None,
            "regex": self.regex,
            "choice": self.choice,
            "grammar": self.grammar,
        }
        return [name for name, value in values.items() if value is not None]


class SamplingExtras(NullMeansDefault):
    """Sampling fields every generating endpoint takes: OpenAI's chat fields that the Responses API
    lacks (``seed``, the penalties, ``stop``) and vLLM's extensions, sent through ``extra_body``."""

    model_config = _LENIENT

    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)  # int64, as vLLM's server
    stop: str | list[str] | None = None
    # vLLM extensions
    top_k: int | None = Field(default=None, ge=-1, le=INT32_MAX)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=10.0)
    min_tokens: int | None = Field(default=None, ge=0, le=INT32_MAX)
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool | None = None
    include_stop_str_in_output: bool = False
    structured_outputs: StructuredOutputs | None = None
    bad_words: list[str] | None = None
    """Words the output must not contain: the backend bans each one's last token wherever the
    tokens before it were just generated (vLLM's ``SamplingParams.bad_words``)."""
    allowed_token_ids: list[int] | None = None
    """The only tokens the backend may sample (vLLM's ``SamplingParams.allowed_token_ids``)."""
    spaces_between_special_tokens: bool | None = None
    priority: int | None = Field(default=None, ge=-(2**31), le=INT32_MAX)
    """vLLM's request priority, lower first: the band the gateway's scheduler runs it in (the
    key's policy may lower it; ``plan/priority.py``)."""

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 16:
            raise ValueError("at most 16 stop sequences are allowed")
        return value


SAMPLING_EXTRAS = tuple(SamplingExtras.model_fields)
"""Their names: what a Responses request passes on to the chat request it becomes."""


class SamplingFields(SamplingExtras):
    """Fields shared by chat and legacy completions, including vLLM's extensions."""

    model: str = Field(min_length=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=128)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=INT32_MAX)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    """OpenAI's cache-routing hint: with several Triton replicas, requests sharing it go to one
    (``routing_policy``)."""
    # vLLM's request-level extras. Declared, not left as unknown extras, so that each one is either
    # honoured or refused by name (``plan/extras.py``); none is dropped without a word.
    use_beam_search: bool = False
    length_penalty: float | None = None
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1, le=INT32_MAX)
    truncation_side: Literal["left", "right"] | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    add_special_tokens: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    cache_salt: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None
    repetition_detection: dict[str, Any] | None = None
    thinking_token_budget: int | None = Field(default=None, le=INT32_MAX)
    stream_interval: int | None = Field(default=None, ge=1, le=INT32_MAX)
    watermarking: bool | None = None
    request_id: str | None = None
    session_id: str | None = None

    @field_validator("logit_bias")
    @classmethod
    def _bias_range(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for token, bias in (value or {}).items():
            if not token.lstrip("-").isdigit():
                raise ValueError(f"logit_bias keys must be token ids, got {token!r}")
            if not -100.0 <= bias <= 100.0:
                raise ValueError("logit_bias values must be between -100 and 100")
        return value


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
"""OpenAI's levels of ``reasoning_effort`` (chat) and ``reasoning.effort`` (Responses), and vLLM's ``max``."""


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=INT32_MAX)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    functions: list[dict[str, Any]] | None = None
    """OpenAI's deprecated form of ``tools`` (one function call per turn), answered in its own
    shape (``message.function_call``); ``plan.tools.legacy_functions``."""
    function_call: Any = None
    """The deprecated form of ``tool_choice``: ``"none"``, ``"auto"`` or ``{"name": ...}``."""
    reasoning_effort: ReasoningEffort | None = None
    """Reaches the chat template as its ``reasoning_effort`` variable, as vLLM passes it; a template
    without a reasoning mode ignores it, as OpenAI's non-reasoning models do."""
    # vLLM extensions
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    """Render the last message open-ended, for the model to continue it (a prefilled answer); no
    generation prompt then (``models.templates.ChatTemplate.render``)."""
    documents: list[dict[str, str]] | None = None
    """Retrieval documents, the chat template's ``documents`` variable (templates without a RAG
    mode ignore them, as on vLLM)."""
    chat_template: str | None = None
    """A Jinja chat template for this request, used only where ``allow_request_chat_template`` is on."""
    echo: bool = False
    """vLLM's chat ``echo``: the answer starts with the last message's content when that message
    is the assistant's (a prefill shown back)."""
    include_reasoning: bool = True
    """False: a reasoning model's reasoning is split from the answer and dropped (still counted)."""


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1, le=INT32_MAX)
    response_format: ResponseFormat | None = None
    """vLLM takes chat's ``response_format`` on completions too: turned into structured outputs."""
    prompt_embeds: Any = None
