"""Chat completion requests → the prompt. Pure.

Every 4xx decision about a chat request's content is made here, before anything reaches Triton.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.models.catalog import ServedModel
from gateway.models.resolve import ResolvedModel
from gateway.models.templates import ChatTemplate
from gateway.plan.images import IMAGE_PART
from gateway.plan.requests import ChatCompletionRequest, ChatMessage, TextContentPart


def message_text(message: ChatMessage, index: int) -> str | None:
    """A message's content as one string: text parts joined with newlines (as vLLM does)."""
    content = message_content(message, index, None)
    assert not isinstance(content, list)  # a list only comes with images, refused without a model
    return content


def message_content(message: ChatMessage, index: int, model: ServedModel | None) -> str | list[dict[str, Any]] | None:
    """A message's content as its chat template takes it. Text parts are joined with newlines (as
    vLLM does). With images (checked before, ``plan/images.py``): a list of parts, each image a
    ``{"type": "image"}``, for a template that loops over content; else the text with the model's
    placeholder once per image in front, one per line, as vLLM's server writes it (placeholders
    the text already holds count as placed; an empty placeholder adds none: the model's processor
    places the image itself)."""
    content = message.content
    if content is None or isinstance(content, str):
        return content
    texts: list[str] = []
    parts: list[dict[str, Any]] = []
    images = 0
    for position, part in enumerate(content):
        if isinstance(part, TextContentPart):
            texts.append(part.text)
            parts.append({"type": "text", "text": part.text})
        elif part.type == IMAGE_PART and model is not None and model.vision:
            images += 1
            parts.append({"type": "image"})
        elif part.type == "text":  # parsed as another part: its text is not a string
            raise InvalidRequestError(
                "a content part of type 'text' needs a 'text' string", param=f"messages.{index}.content.{position}.text"
            )
        else:
            raise InvalidRequestError(
                f"content parts of type '{part.type}' are not supported by this model",
                param=f"messages.{index}.content.{position}",
            )
    text = "\n".join(texts)
    if not images or model is None:
        return text
    if model.image_parts:
        return parts
    placeholder = model.image_placeholder
    missing = images - text.count(placeholder) if placeholder else 0
    if missing < 0:
        raise InvalidRequestError(
            f"the text holds more '{placeholder}' placeholders than the message has images", param=f"messages.{index}"
        )
    return "\n".join([placeholder] * missing + ([text] if text else []))


def to_template_messages(request: ChatCompletionRequest, model: ServedModel | None = None) -> list[dict[str, Any]]:
    messages = []
    for index, message in enumerate(request.messages):
        item: dict[str, Any] = {"role": message.role, "content": message_content(message, index, model)}
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
    request: ChatCompletionRequest,
    resolved: ResolvedModel,
    tools: list[dict[str, Any]] | None = None,
    *,
    allow_request_template: bool = False,
) -> str:
    """The prompt text; ``tools`` is what the template's ``tools`` variable gets (``plan/tools.py``)."""
    template = chat_template_for(request, resolved, allow_request_template)
    if template is None:
        raise InvalidRequestError(
            f"The model '{resolved.model.name}' has no chat template the gateway can find; "
            "use /v1/completions or configure the model's tokenizer directory.",
            param="model",
        )
    return template.render(
        to_template_messages(request, resolved.model),
        add_generation_prompt=request.add_generation_prompt,
        tools=tools,
        extra=template_kwargs(request),
        documents=request.documents,
        continue_final_message=request.continue_final_message,
    )


def chat_template_for(request: ChatCompletionRequest, resolved: ResolvedModel, allowed: bool) -> ChatTemplate | None:
    """The model's template, or the request's own ``chat_template`` where the setting allows it:
    a template is code the gateway runs (sandboxed), so an operator opts in."""
    if request.chat_template is None:
        return resolved.model.template
    if not allowed:
        raise InvalidRequestError(
            "'chat_template' is not allowed on this gateway (setting allow_request_chat_template)",
            param="chat_template",
        )
    model_template = resolved.model.template
    if model_template is None:
        return ChatTemplate.for_client(request.chat_template)
    return model_template.with_source(request.chat_template)


def template_kwargs(request: ChatCompletionRequest) -> dict[str, Any] | None:
    """The template's extra variables: ``chat_template_kwargs``, and ``reasoning_effort`` when set
    (over a kwarg of the same name, as vLLM sets it)."""
    if request.reasoning_effort is None:
        return request.chat_template_kwargs
    return {**(request.chat_template_kwargs or {}), "reasoning_effort": request.reasoning_effort}


def chat_echo(request: ChatCompletionRequest) -> tuple[str] | None:
    """vLLM's chat ``echo``: the last message's text said first, when it is the assistant's (the
    role of the answer), as vLLM's server shows a prefilled answer back; else nothing."""
    last = request.messages[-1]
    if not request.echo or last.role != "assistant":
        return None
    return (message_text(last, len(request.messages) - 1) or "",)


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
