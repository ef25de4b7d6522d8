"""An Anthropic Messages request → the chat request it means → the same ``GenerationPlan`` chat gets.

A Messages request is a chat completion with one choice spelled in Anthropic's blocks, so it is
planned by ``prepare.prepare_chat`` itself: the model, the template, the token budget, tool calling,
reasoning and every check are chat's, and the core cannot tell the two apart. What is the Messages
API's own is decided here:

- the conversation: ``system`` (a string or text blocks) becomes a system message, and so does a
  ``system`` turn inside ``messages``, where it was sent; an assistant turn's ``text``,
  ``thinking`` and ``tool_use`` blocks become one assistant message (content, reasoning, tool
  calls), a thinking block's text read from its sealed ``signature`` where it is this gateway's
  (``reasoning.seal``: the client may send it back emptied); a user turn's ``tool_result`` blocks
  become tool messages and its ``text``/``image`` blocks user messages, in their order; a last
  assistant turn is a prefill the model continues (``continue_final_message``);
- ``context_management`` edits (``plan/context_edits.py``), applied to the turns first;
- tools (``input_schema`` is chat's ``parameters``; Anthropic's server tools are refused by name;
  a ``defer_loading`` tool joins the prompt only once a ``tool_reference`` loads it),
  ``tool_choice`` (``auto``/``any``/``tool``/``none``, ``disable_parallel_tool_use``);
- ``thinking``: ``enabled`` and ``adaptive`` turn the template's switches (``enable_thinking``,
  ``thinking``) on as ``chat_template_kwargs`` would, ``disabled`` off; ``budget_tokens`` is
  checked as Anthropic checks it and not enforced; ``display: "omitted"`` sends thinking blocks
  without their text. ``output_config.effort`` is chat's ``reasoning_effort``, its ``format``
  chat's ``response_format``;
- ``max_tokens`` over the room the prompt leaves is lowered to it (Anthropic's clients send one
  ``max_tokens`` for every model); running out of it is ``model_context_window_exceeded``;
- stop sequences are sent to the backend to be kept in its output and cut by the gateway's own
  assembly, which then knows which one matched (``stop_sequence`` in the answer; ``cut_stops_here``).

A 4xx raised by chat's planning names chat's field; it is renamed to the Messages field the client
sent (``messages.3`` → the turn it came from, ``stop`` → ``stop_sequences``...).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gateway.config import Settings
from gateway.core.generation_plan import GenerationPlan
from gateway.errors import InvalidRequestError
from gateway.models.catalog import ModelCatalog
from gateway.plan.context_edits import (
    CLEAR_THINKING,
    CLEAR_TOOL_USES,
    check_edits,
    clear_thinking,
    clear_tool_uses,
    thinking_keep,
    tool_use_edit,
    tool_uses_over,
)
from gateway.plan.count import count_chat_prompt
from gateway.plan.messages_request import (
    MIN_THINKING_BUDGET,
    AnthropicMessage,
    MessagesCountRequest,
    MessagesRequest,
)
from gateway.plan.prepare import RequestContext, prepare_chat
from gateway.plan.requests import ChatCompletionRequest
from gateway.reasoning.seal import ReasoningSeal

THINKING_SWITCHES = ("enable_thinking", "thinking")
"""The chat template variables that turn a model's reasoning on and off (Qwen3 and GLM read
``enable_thinking``, DeepSeek V3.1 ``thinking``)."""


@dataclass(frozen=True, slots=True)
class MessagesPlan:
    """One Messages request, decided: chat's plan and what the message object echoes."""

    generation: GenerationPlan
    message_id: str
    model: str
    show_thinking: bool = True
    """``thinking.display`` is not ``omitted``: thinking blocks carry their text."""
    window_limited: bool = False
    """``max_tokens`` was lowered to what the context leaves (``model_context_window_exceeded``)."""
    context_management: dict[str, Any] | None = None
    """``{"applied_edits": [...]}``, answered when the request asked for context editing."""


async def prepare_message(
    body: MessagesRequest, context: RequestContext, catalog: ModelCatalog, settings: Settings, seal: ReasoningSeal
) -> MessagesPlan:
    check_thinking(body)
    body, applied = await edit_context(body, catalog, settings, seal)
    chat, origins = to_chat_request(body, seal)
    context = dataclasses.replace(context, max_tokens_up_to_context=True)
    try:
        generation = await prepare_chat(chat, context, catalog, settings)
    except InvalidRequestError as exc:
        exc.param = messages_param(exc.param, origins)
        raise
    thinking = body.thinking
    if thinking is not None and thinking.type == "enabled" and generation.reasoning is None:
        raise InvalidRequestError(
            f"thinking is not supported by the model '{body.model}': it has no reasoning parser "
            "(set one in GATEWAY_MODEL_FILES)",
            param="thinking",
        )
    generation = dataclasses.replace(cut_stops_here(generation), api="messages")
    cap = settings.limits_for(generation.model)[2]  # lowered to it: the stop is max_tokens, as asked
    return MessagesPlan(
        generation=generation,
        message_id=f"msg_{os.urandom(12).hex()}",
        model=body.model,
        show_thinking=thinking is None or thinking.display != "omitted",
        window_limited=generation.max_tokens[0] < min(body.max_tokens, cap or body.max_tokens),
        context_management=None if body.context_management is None else {"applied_edits": applied},
    )


async def edit_context(
    body: MessagesCountRequest, catalog: ModelCatalog, settings: Settings, seal: ReasoningSeal
) -> tuple[Any, list[dict[str, Any]]]:
    """The request with its ``context_management`` edits applied, and what each one cleared (as
    Anthropic reports it). The prompt is counted only where an edit needs it: for a token trigger,
    and, where an edit clears something, before and after it for ``cleared_input_tokens``."""
    edits = body.context_management.edits if body.context_management is not None else []
    if not edits:
        return body, []
    check_edits(edits)

    async def count(messages: list[AnthropicMessage]) -> int:
        chat, _ = to_chat_request(body.model_copy(update={"messages": messages}), seal)
        return await count_chat_prompt(chat, catalog, settings)

    messages = list(body.messages)
    counted: int | None = None
    """The count of ``messages`` as they now are, once needed."""
    applied: list[dict[str, Any]] = []
    for index, edit in enumerate(edits):
        where = f"context_management.edits.{index}"
        if edit["type"] == CLEAR_THINKING:
            edited, cleared = clear_thinking(messages, thinking_keep(edit, where))
            report = {"type": CLEAR_THINKING, "cleared_thinking_turns": cleared}
        else:
            rule = tool_use_edit(edit, where)
            if rule.trigger_kind == "input_tokens" and counted is None:
                counted = await count(messages)
            if not tool_uses_over(messages, rule, counted or 0):
                continue
            edited, cleared = clear_tool_uses(messages, rule)
            report = {"type": CLEAR_TOOL_USES, "cleared_tool_uses": cleared}
        if not cleared:
            continue
        if counted is None:
            counted = await count(messages)
        after = await count(edited)
        if report["type"] == CLEAR_TOOL_USES and counted - after < rule.clear_at_least:
            continue  # clearing would not free enough: Anthropic leaves the conversation as it was
        report["cleared_input_tokens"] = max(counted - after, 0)
        messages, counted = edited, after
        applied.append(report)
    return body.model_copy(update={"messages": messages}), applied


def cut_stops_here(generation: GenerationPlan) -> GenerationPlan:
    """The backend keeps a matched stop sequence in its output (``include_stop_str_in_output``)
    and the gateway's assembly cuts it, so the answer can name it (``stop_sequence``).

    Not where the backend keeps special tokens (``skip_special_tokens: false``, for a tool-call or
    reasoning format whose markers are special tokens): keeping the stop there keeps the text of
    an end-of-sequence token too, which would reach the answer. There the backend cuts the stop
    itself and the answer cannot say which one matched (``stop_reason: "end_turn"``)."""
    if any(request.sampling.get("skip_special_tokens") is False for request in generation.requests):
        requests = tuple(
            dataclasses.replace(
                request,
                sampling={k: v for k, v in request.sampling.items() if k != "include_stop_str_in_output"},
            )
            for request in generation.requests
        )
        return dataclasses.replace(generation, requests=requests, include_stop=False)
    return dataclasses.replace(generation, include_stop=False)


async def count_message_tokens(
    body: MessagesCountRequest, catalog: ModelCatalog, settings: Settings, seal: ReasoningSeal
) -> int:
    """The ``input_tokens`` the same request would be billed: its chat request's prompt (after its
    context edits), counted."""
    check_thinking(body)
    body, _ = await edit_context(body, catalog, settings, seal)
    chat, origins = to_chat_request(body, seal)
    try:
        return await count_chat_prompt(chat, catalog, settings)
    except InvalidRequestError as exc:
        exc.param = messages_param(exc.param, origins)
        raise


def check_thinking(body: MessagesCountRequest) -> None:
    """Anthropic's rules for ``thinking``: a budget of at least 1024 tokens, below ``max_tokens``
    (``enabled``; ``adaptive`` has none), and no tool use forced beside it."""
    thinking = body.thinking
    if thinking is None or thinking.type == "disabled":
        return
    if body.tool_choice is not None and body.tool_choice.get("type") in ("any", "tool"):
        raise InvalidRequestError(
            "Thinking may not be enabled when tool_choice forces tool use.", param="tool_choice.type"
        )
    if thinking.type == "adaptive":
        return
    budget = thinking.budget_tokens
    if budget is None:
        raise InvalidRequestError("'thinking.budget_tokens' is a required property", param="thinking.budget_tokens")
    if budget < MIN_THINKING_BUDGET:
        raise InvalidRequestError(
            f"thinking.budget_tokens must be at least {MIN_THINKING_BUDGET}, got {budget}",
            param="thinking.budget_tokens",
        )
    if isinstance(body, MessagesRequest) and budget >= body.max_tokens:
        raise InvalidRequestError(
            f"thinking.budget_tokens ({budget}) must be less than max_tokens ({body.max_tokens})",
            param="thinking.budget_tokens",
        )


def to_chat_request(body: MessagesCountRequest, seal: ReasoningSeal) -> tuple[ChatCompletionRequest, list[str]]:
    """The chat request with the same meaning, and where each of its messages came from."""
    messages, origins = to_chat_messages(body, seal)
    loaded = loaded_tools(body.messages)
    tools = chat_tools(body.tools, loaded) if body.tools else None
    choice, parallel = chat_tool_choice(body.tool_choice, bool(tools))
    thinking = body.thinking
    output = body.output_config
    fields: dict[str, Any] = {
        "model": body.model,
        "messages": messages,
        "tools": tools or None,
        "tool_choice": choice,
        "parallel_tool_calls": parallel,
        "include_reasoning": thinking is not None and thinking.on,
        "reasoning_effort": output.effort if output is not None else None,
        "response_format": output_format(output.format) if output is not None and output.format else None,
    }
    if thinking is not None:
        fields["chat_template_kwargs"] = dict.fromkeys(THINKING_SWITCHES, thinking.on)
    if messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls"):
        fields.update(continue_final_message=True, add_generation_prompt=False)  # a prefill
    if isinstance(body, MessagesRequest):
        stops = [stop for stop in body.stop_sequences or () if stop]
        fields.update(
            stream=body.stream,
            max_tokens=body.max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            stop=stops or None,
            include_stop_str_in_output=bool(stops),
            user=body.metadata.user_id if body.metadata is not None else None,
        )
    try:
        return ChatCompletionRequest.model_validate(fields), origins
    except ValidationError as exc:  # a bound of chat's that Anthropic's field does not have
        error = exc.errors()[0]
        where = messages_param(".".join(str(part) for part in error["loc"]), origins) or None
        raise InvalidRequestError(f"Invalid value for '{where or 'the request'}': {error['msg']}", param=where) from exc


def output_format(value: dict[str, Any]) -> dict[str, Any]:
    """``output_config.format`` (``{"type": "json_schema", "schema": ...}``) → chat's ``response_format``."""
    if value.get("type") != "json_schema" or not isinstance(value.get("schema"), dict):
        raise InvalidRequestError(
            "output_config.format must be {'type': 'json_schema', 'schema': {...}}", param="output_config.format"
        )
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": value["schema"]}}


def to_chat_messages(body: MessagesCountRequest, seal: ReasoningSeal) -> tuple[list[dict[str, Any]], list[str]]:
    """Chat messages, and per message the Messages field it came from (``system``, ``messages.N``)."""
    messages: list[dict[str, Any]] = []
    origins: list[str] = []
    if body.system:
        system = body.system if isinstance(body.system, str) else blocks_text(body.system, "system")
        messages.append({"role": "system", "content": system})
        origins.append("system")
    for index, message in enumerate(body.messages):
        where = f"messages.{index}"
        if isinstance(message.content, str):
            turn = [{"role": message.role, "content": message.content}]
        elif message.role == "system":
            turn = [{"role": "system", "content": blocks_text(message.content, f"{where}.content")}]
        elif message.role == "assistant":
            turn = [assistant_message(message.content, where, seal, body.model)]
        else:
            turn = user_messages(message.content, where)
        messages.extend(turn)
        origins.extend([where] * len(turn))
    return messages, origins


def _block(block: Any, where: str) -> str:
    """A block's type, after checking it is an object with one."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise InvalidRequestError("each content block must be an object with a 'type'", param=where)
    return str(block["type"])


def _string(block: dict[str, Any], key: str, where: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise InvalidRequestError(f"'{key}' must be a string", param=f"{where}.{key}")
    return value


def blocks_text(blocks: list[dict[str, Any]], where: str, *, references: bool = False) -> str:
    """Text blocks joined (``system``, a tool result's content): any other block is a 400, but
    for ``tool_reference`` blocks where ``references`` (a tool result)."""
    texts = []
    for index, block in enumerate(blocks):
        at = f"{where}.{index}"
        kind = _block(block, at)
        if kind == "tool_reference" and references:
            texts.append(f"Tool loaded: {_string(block, 'tool_name', at)}")
            continue
        if kind != "text":
            raise InvalidRequestError(f"content blocks of type '{kind}' are not supported here", param=f"{at}.type")
        texts.append(_string(block, "text", at))
    return "\n".join(texts)


def assistant_message(blocks: list[dict[str, Any]], where: str, seal: ReasoningSeal, model: str) -> dict[str, Any]:
    """An assistant turn: its text, its thinking (sent back for interleaved-thinking templates)
    and its tool calls, as one chat message. A thinking block whose ``signature`` is this
    gateway's seal for the model gives the sealed text (the block's own may be empty or edited);
    any other is taken as written."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        at = f"{where}.content.{index}"
        kind = _block(block, at)
        if kind == "text":
            texts.append(_string(block, "text", at))
        elif kind == "thinking":
            signature = block.get("signature")
            sealed = seal.open(signature, model) if isinstance(signature, str) and signature else None
            thoughts.append(sealed if sealed is not None else _string(block, "thinking", at))
        elif kind == "redacted_thinking":
            continue  # encrypted by another server: nothing a template can read
        elif kind == "tool_use":
            arguments = block.get("input", {})
            if not isinstance(arguments, dict):
                raise InvalidRequestError("'input' must be an object", param=f"{at}.input")
            calls.append(
                {
                    "id": _string(block, "id", at),
                    "type": "function",
                    "function": {"name": _string(block, "name", at), "arguments": json.dumps(arguments)},
                }
            )
        else:
            raise InvalidRequestError(
                f"content blocks of type '{kind}' are not supported in assistant messages", param=f"{at}.type"
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if thoughts:
        message["reasoning"] = "".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def user_messages(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """A user turn: each ``tool_result`` a tool message, the text and images between them user
    messages, in their order."""
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        at = f"{where}.content.{index}"
        kind = _block(block, at)
        if kind == "text":
            parts.append({"type": "text", "text": _string(block, "text", at)})
        elif kind == "image":
            parts.append(image_part(block, at))
        elif kind == "tool_result":
            if parts:
                out.append({"role": "user", "content": parts})
                parts = []
            out.append(tool_message(block, at))
        else:
            raise InvalidRequestError(
                f"content blocks of type '{kind}' are not supported: use text, image, tool_use and tool_result",
                param=f"{at}.type",
            )
    if parts or not out:
        out.append({"role": "user", "content": parts})
    return out


def image_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    """An image block → chat's ``image_url`` part (a data URL for a base64 source), which chat's
    planning takes or refuses for the model."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise InvalidRequestError("an image block needs a 'source' object", param=f"{where}.source")
    if source.get("type") == "base64":
        media = _string(source, "media_type", f"{where}.source")
        data = _string(source, "data", f"{where}.source")
        return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}
    if source.get("type") == "url":
        return {"type": "image_url", "image_url": {"url": _string(source, "url", f"{where}.source")}}
    raise InvalidRequestError(
        f"image sources of type {source.get('type')!r} are not supported: use 'base64' or 'url'",
        param=f"{where}.source.type",
    )


def tool_message(block: dict[str, Any], where: str) -> dict[str, Any]:
    """A ``tool_result``: its text; a ``tool_reference`` among its blocks (a tool search's answer)
    says the tool it loads, whose definition joins the prompt's tools (``loaded_tools``)."""
    content = block.get("content", "")
    if isinstance(content, list):
        content = blocks_text(content, f"{where}.content", references=True)
    elif not isinstance(content, str):
        raise InvalidRequestError("'content' must be a string or text blocks", param=f"{where}.content")
    return {"role": "tool", "tool_call_id": _string(block, "tool_use_id", where), "content": content}


def loaded_tools(messages: list[AnthropicMessage]) -> frozenset[str]:
    """The deferred tools the conversation has loaded: those a ``tool_reference`` block in a
    tool result names (what a tool search answers)."""
    names: set[str] = set()
    for message in messages:
        if message.role != "user" or isinstance(message.content, str):
            continue
        for block in message.content:
            if (
                isinstance(block, dict)
                and block.get("type") == "tool_result"
                and isinstance(block.get("content"), list)
            ):
                names.update(
                    str(part["tool_name"])
                    for part in block["content"]
                    if isinstance(part, dict) and part.get("type") == "tool_reference" and "tool_name" in part
                )
    return frozenset(names)


def chat_tools(tools: list[dict[str, Any]], loaded: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Anthropic's client tools → chat's function tools; server tools (``web_search_...``,
    ``bash_...``) run on Anthropic's side and are refused by name. A tool with
    ``defer_loading`` costs nothing in the prompt until a tool search loads it (``loaded``), as
    on Anthropic's API: until then the model neither sees nor can call it."""
    out = []
    for index, tool in enumerate(tools):
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise InvalidRequestError(
                f"tools of type {kind!r} are not supported: only client tools (name, description, input_schema) are",
                param=f"tools.{index}.type",
            )
        if tool.get("defer_loading") is True and tool.get("name") not in loaded:
            continue
        function = {"name": tool.get("name")}
        if "description" in tool:
            function["description"] = tool["description"]
        if "input_schema" in tool:
            function["parameters"] = tool["input_schema"]
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: dict[str, Any] | None, has_tools: bool) -> tuple[Any, bool | None]:
    """``tool_choice`` → chat's ``tool_choice`` and ``parallel_tool_calls``."""
    if choice is None:
        return None, None
    parallel = False if choice.get("disable_parallel_tool_use") is True else None
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return (kind if has_tools else None), parallel
    if kind == "any":
        return "required", parallel
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequestError("a tool_choice of type 'tool' needs a 'name'", param="tool_choice.name")
        return {"type": "function", "function": {"name": name}}, parallel
    raise InvalidRequestError(
        f"tool_choice type {kind!r} is not supported: use 'auto', 'any', 'tool' or 'none'", param="tool_choice.type"
    )


_PARAMS = (
    (re.compile(r"^(max_tokens|max_completion_tokens)$"), "max_tokens"),
    (re.compile(r"^stop(\..*)?$"), r"stop_sequences\1"),
    (re.compile(r"^user$"), "metadata.user_id"),
    (re.compile(r"^chat_template_kwargs(\..*)?$"), "thinking"),
    (re.compile(r"^parallel_tool_calls$"), "tool_choice.disable_parallel_tool_use"),
    (re.compile(r"^tools\.(\d+)\.function\.parameters(\..*)?$"), r"tools.\1.input_schema\2"),
    (re.compile(r"^tools\.(\d+)\.function$"), r"tools.\1"),
    (re.compile(r"^tools\.(\d+)\.function\.(.*)$"), r"tools.\1.\2"),
    (re.compile(r"^tool_choice\.function(\.(.*))?$"), r"tool_choice.\2"),
)


def messages_param(param: str | None, origins: list[str]) -> str | None:
    """Chat's name for a field → the Messages request's (``origins``: the turn each chat message
    came from)."""
    if param is None:
        return None
    if param == "messages" or param.startswith("messages."):
        index = param.split(".")[1] if "." in param else ""
        return origins[int(index)] if index.isdigit() and int(index) < len(origins) else "messages"
    for pattern, replacement in _PARAMS:
        if pattern.match(param):
            return pattern.sub(replacement, param).rstrip(".")
    return param
