"""Anthropic's context editing (``context_management.edits``): old thinking and old tool results
taken out of a conversation before it is rendered, as Anthropic's API does server-side.

- ``clear_thinking_20251015``: the thinking blocks of all but the last ``keep`` assistant turns
  that have any (``keep``: ``{"type": "thinking_turns", "value": N}``, default 1, or ``"all"``).
- ``clear_tool_uses_20250919``: once the prompt is over ``trigger`` (``input_tokens``, default
  100,000, or ``tool_uses``), the results of all but the last ``keep`` tool uses (default 3)
  become a short placeholder, oldest first, skipping ``exclude_tools``; ``clear_tool_inputs``
  empties the calls' inputs too; ``clear_at_least`` (input tokens) leaves all as it was unless
  clearing frees that much.

Pure functions over the request's turns; the planner (``plan/messages.py``) counts the prompt
before and after, for the trigger and for ``cleared_input_tokens`` in the answer's
``context_management.applied_edits``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.plan.messages_request import AnthropicMessage

CLEAR_THINKING = "clear_thinking_20251015"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEARED_RESULT = "[cleared to save context]"
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP_TOOL_USES = 3


@dataclass(frozen=True, slots=True)
class ToolUseEdit:
    """A ``clear_tool_uses`` edit, read and checked."""

    trigger_kind: str
    trigger: int
    keep: int
    exclude: frozenset[str]
    clear_inputs: bool
    clear_at_least: int


def _count_setting(value: Any, kinds: tuple[str, ...], default: tuple[str, int], where: str) -> tuple[str, int]:
    if value is None:
        return default
    if not isinstance(value, dict) or value.get("type") not in kinds:
        raise InvalidRequestError(f"must be an object with 'type' one of {', '.join(kinds)}", param=where)
    number = value.get("value")
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        raise InvalidRequestError("'value' must be a non-negative integer", param=f"{where}.value")
    return str(value["type"]), number


def thinking_keep(edit: dict[str, Any], where: str) -> int | None:
    """How many thinking turns a ``clear_thinking`` edit keeps; None: all."""
    keep = edit.get("keep")
    if keep == "all":
        return None
    return _count_setting(keep, ("thinking_turns",), ("thinking_turns", 1), f"{where}.keep")[1]


def tool_use_edit(edit: dict[str, Any], where: str) -> ToolUseEdit:
    kind, trigger = _count_setting(
        edit.get("trigger"), ("input_tokens", "tool_uses"), ("input_tokens", DEFAULT_TRIGGER_TOKENS), f"{where}.trigger"
    )
    keep = _count_setting(edit.get("keep"), ("tool_uses",), ("tool_uses", DEFAULT_KEEP_TOOL_USES), f"{where}.keep")[1]
    least = _count_setting(
        edit.get("clear_at_least"), ("input_tokens",), ("input_tokens", 0), f"{where}.clear_at_least"
    )
    exclude = edit.get("exclude_tools") or []
    if not isinstance(exclude, list) or not all(isinstance(name, str) for name in exclude):
        raise InvalidRequestError("'exclude_tools' must be a list of tool names", param=f"{where}.exclude_tools")
    clear_inputs = edit.get("clear_tool_inputs", False)
    if not isinstance(clear_inputs, bool):
        raise InvalidRequestError("'clear_tool_inputs' must be a boolean", param=f"{where}.clear_tool_inputs")
    return ToolUseEdit(kind, trigger, keep, frozenset(exclude), clear_inputs, least[1])


def check_edits(edits: list[dict[str, Any]]) -> None:
    """Every edit known and well formed; ``clear_thinking`` first, as Anthropic requires."""
    for index, edit in enumerate(edits):
        where = f"context_management.edits.{index}"
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind == CLEAR_THINKING:
            if index != 0:
                raise InvalidRequestError(f"'{CLEAR_THINKING}' must be the first edit", param=f"{where}.type")
            thinking_keep(edit, where)
        elif kind == CLEAR_TOOL_USES:
            tool_use_edit(edit, where)
        else:
            raise InvalidRequestError(
                f"context edit type {kind!r} is not supported: use '{CLEAR_THINKING}' or '{CLEAR_TOOL_USES}'",
                param=f"{where}.type",
            )


def _blocks(message: AnthropicMessage) -> list[dict[str, Any]]:
    return message.content if isinstance(message.content, list) else []


def clear_thinking(messages: list[AnthropicMessage], keep: int | None) -> tuple[list[AnthropicMessage], int]:
    """The turns with thinking removed from all but the last ``keep`` assistant turns having any,
    and how many turns lost theirs."""
    if keep is None:
        return messages, 0
    thinking_turns = [
        index
        for index, message in enumerate(messages)
        if message.role == "assistant"
        and any(block.get("type") in ("thinking", "redacted_thinking") for block in _blocks(message))
    ]
    cleared = set(thinking_turns[: max(len(thinking_turns) - keep, 0)])
    out = [
        message.model_copy(
            update={"content": [b for b in _blocks(message) if b.get("type") not in ("thinking", "redacted_thinking")]}
        )
        if index in cleared
        else message
        for index, message in enumerate(messages)
    ]
    return out, len(cleared)


def _tool_uses(messages: list[AnthropicMessage]) -> list[tuple[str, str]]:
    """Every tool use in order: its id and its tool's name."""
    return [
        (str(block.get("id")), str(block.get("name")))
        for message in messages
        if message.role == "assistant"
        for block in _blocks(message)
        if block.get("type") == "tool_use"
    ]


def tool_uses_over(messages: list[AnthropicMessage], edit: ToolUseEdit, prompt_tokens: int) -> bool:
    """Whether the conversation is past the edit's trigger."""
    if edit.trigger_kind == "tool_uses":
        return len(_tool_uses(messages)) > edit.trigger
    return prompt_tokens > edit.trigger


def clear_tool_uses(messages: list[AnthropicMessage], edit: ToolUseEdit) -> tuple[list[AnthropicMessage], int]:
    """The turns with the results (and, with ``clear_inputs``, the inputs) of the oldest tool uses
    beyond the last ``keep`` replaced, and how many were cleared."""
    uses = _tool_uses(messages)
    eligible = [use_id for use_id, name in uses[: max(len(uses) - edit.keep, 0)] if name not in edit.exclude]
    if not eligible:
        return messages, 0
    chosen = frozenset(eligible)
    out = []
    for message in messages:
        blocks = _blocks(message)
        if not any(block.get("id") in chosen or block.get("tool_use_id") in chosen for block in blocks):
            out.append(message)
            continue
        new_blocks = []
        for block in blocks:
            if block.get("type") == "tool_result" and block.get("tool_use_id") in chosen:
                block = {**block, "content": CLEARED_RESULT}
            elif block.get("type") == "tool_use" and block.get("id") in chosen and edit.clear_inputs:
                block = {**block, "input": {}}
            new_blocks.append(block)
        out.append(message.model_copy(update={"content": new_blocks}))
    return out, len(chosen)
