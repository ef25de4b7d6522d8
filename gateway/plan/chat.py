"""Chat completion requests → the prompt. Pure.

Every 4xx decision about a chat request's content is made here, before anything reaches Triton.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.models.resolve import ResolvedModel
from gateway.plan.requests import ChatCompletionRequest, ChatMessage, TextContentPart


def message_text(message: ChatMessage, index: int) -> str | None:
    """A message's content as one string: text parts joined with newlines (as vLLM does)."""
    content = message.content
    if content is None or isinstance(content, str):
        return content
    texts = []
    for part in content:
        if not isinstance(part, TextContentPart):
            raise InvalidRequestError(
                f"content parts of type '{part.type}' are not supported: this model takes text only",
                param=f"messages.{index}.content",
            )
        texts.append(part.text)
    return "\n".join(texts)


def to_template_messages(request: ChatCompletionRequest) -> list[dict[str, Any]]:
    messages = []
    for index, message in enumerate(request.messages):
        item: dict[str, Any] = {"role": message.role, "content": message_text(message, index)}
        if message.name is not None:
            item["name"] = message.name
        if message.tool_calls is not None:
            item["tool_calls"] = template_tool_calls(message.tool_calls, index)
        if message.tool_call_id is not None:
            item["tool_call_id"] = message.tool_call_id
        reasoning = message.reasoning if message.reasoning is not None else message.reasoning_content
        if reasoning is not None:
            # Templates read it under one of three names: Qwen3, GLM, Kimi and MiniMax
            # ``reasoning_content``, newer ones ``reasoning``, gpt-oss ``thinking``.
            item["reasoning_content"] = item["reasoning"] = item["thinking"] = reasoning
        messages.append(item)
    return messages


def render_chat_prompt(
    request: ChatCompletionRequest, resolved: ResolvedModel, tools: list[dict[str, Any]] | None = None
) -> str:
    """The prompt text; ``tools`` is what the template's ``tools`` variable gets (``plan/tools.py``)."""
    template = resolved.model.template
    if template is None:
        raise InvalidRequestError(
            f"The model '{resolved.model.name}' has no chat template the gateway can find; "
            "use /v1/completions or configure the model's tokenizer directory.",
            param="model",
        )
    return template.render(
        to_template_messages(request),
        add_generation_prompt=request.add_generation_prompt,
        tools=tools,
        extra=template_kwargs(request),
    )


def template_kwargs(request: ChatCompletionRequest) -> dict[str, Any] | None:
    """The template's extra variables: ``chat_template_kwargs``, and ``reasoning_effort`` when set
    (over a kwarg of the same name, as vLLM sets it)."""
    if request.reasoning_effort is None:
        return request.chat_template_kwargs
    return {**(request.chat_template_kwargs or {}), "reasoning_effort": request.reasoning_effort}


def chat_max_tokens(request: ChatCompletionRequest) -> int | None:
    """``max_completion_tokens`` wins over the deprecated ``max_tokens``."""
    return request.max_completion_tokens or request.max_tokens


def template_tool_calls(calls: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls`` as templates expect them: arguments as objects.

    They arrive as JSON *strings* (OpenAI's wire form), while Hugging Face templates index or
    ``tojson`` them as objects: they are parsed for the template, as vLLM does."""
    out = []
    for position, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise InvalidRequestError(
                "a tool call needs a 'function' object", param=f"messages.{index}.tool_calls.{position}.function"
            )
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise InvalidRequestError(
                    f"tool call arguments must be a JSON object: {exc.msg}",
                    param=f"messages.{index}.tool_calls.{position}.function.arguments",
                ) from exc
        out.append({**call, "function": {**function, "arguments": arguments}})
    return out
