"""From parsed JSON to a ``ParsedCall``, or None when the object is not a valid call.

Every parser goes through here, so "valid" means the same thing in every format: an object
with a string ``name`` among the request's tools, and arguments that are a JSON object (or a
JSON string holding one), re-dumped in one spelling.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from gateway.tools.types import ParsedCall

INVALID: Any = object()
"""What ``load_json`` returns for text that is not JSON (``None`` is JSON's ``null``)."""

ARGUMENT_KEYS = ("arguments", "parameters")
"""Hermes and Mistral write ``arguments``, Llama 3 and vLLM's forced ``required`` array write
``parameters``; fine-tunes mix them up, and the name alone decides what a call is."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400
        raise ValueError(text)
    return value


def load_json(text: str) -> Any:
    """``json.loads``, refusing NaN, Infinity and numbers too large for a float (all would be
    re-dumped as invalid JSON); INVALID on any failure, deep nesting included."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):
        return INVALID


def _zero(text: str) -> int:
    return 0


def verbatim_object(text: str) -> str | None:
    """``text`` itself when it is one JSON object, else None.

    For arguments that ``load_json`` refuses only because Python cannot hold a number in them
    (``1e400``, an integer of thousands of digits): they are valid JSON, and a forced call's
    text is its arguments, so the model's own spelling goes out instead of the call turning
    into content (vLLM sends the text as it is, always).
    """
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_zero, parse_int=_zero)
    except (ValueError, RecursionError):
        return None
    return text.strip() if isinstance(value, dict) else None


def dump_arguments(arguments: dict[str, Any]) -> str | None:
    """The one spelling of a call's arguments (see ``ParsedCall``), or None when it cannot be
    sent: a lone surrogate (``"\\ud83d"`` in the model's JSON or Python string) has no UTF-8
    form, and would fail the response encoder instead of coming back as text."""
    text = json.dumps(arguments, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return text


def arguments_text(value: Any) -> str | None:
    """The arguments as JSON text, when they are an object or a JSON string holding one."""
    if isinstance(value, str):
        value = load_json(value)
    if not isinstance(value, dict):
        return None
    return dump_arguments(value)


def call_from_object(obj: Any, tool_names: frozenset[str]) -> ParsedCall | None:
    """A call from ``{"name": ..., "arguments" | "parameters": {...}}``, or None.

    Missing arguments mean ``{}``: a function without parameters is still called by name.
    Other keys (Mistral's ``id``, a fine-tune's ``type``) are ignored.
    """
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or name not in tool_names:
        return None
    for key in ARGUMENT_KEYS:
        if key in obj:
            arguments = arguments_text(obj[key])
            return None if arguments is None else ParsedCall(name, arguments)
    return ParsedCall(name, "{}")


def calls_from_array(value: Any, tool_names: frozenset[str]) -> list[ParsedCall] | None:
    """Every element a valid call, and at least one; else None (the array is content)."""
    if not isinstance(value, list) or not value:
        return None
    calls: list[ParsedCall] = []
    for item in value:
        call = call_from_object(item, tool_names)
        if call is None:
            return None
        calls.append(call)
    return calls


def calls_from_json_text(text: str, tool_names: frozenset[str]) -> Sequence[ParsedCall] | None:
    """An array of calls or one call object, from JSON text; None when either is invalid."""
    value = load_json(text)
    if isinstance(value, list):
        return calls_from_array(value, tool_names)
    call = call_from_object(value, tool_names)
    return None if call is None else (call,)
