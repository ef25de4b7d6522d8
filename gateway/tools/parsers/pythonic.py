"""``pythonic``: a Python list of calls, ``[get_weather(city="Paris"), other()]``.

Llama 4's native format (its pythonic prompt asks for ``[func_name1(param=value, ...), ...]``)
and Llama 3.2's pythonic variant. The list must open the output, after optional whitespace and
``<|python_start|>``; ``<|python_end|>`` after it is dropped. It is parsed with ``ast``, never
evaluated: arguments must be keyword arguments whose values are literals (strings, numbers,
booleans, None as null, lists, dicts with string keys). Anything else (a variable, a call, a
positional argument, an f-string, a tuple) makes the whole list content.
"""

from __future__ import annotations

import ast
import math
import re
import warnings
from collections.abc import Sequence
from typing import Any

from gateway.tools.calls import INVALID, dump_arguments
from gateway.tools.scan import PythonSpan
from gateway.tools.stream import LeadingParser, Span
from gateway.tools.types import ParsedCall

PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"

_CALL_OPENS = re.compile(r"\[\s*[A-Za-z_][A-Za-z0-9_]*\s*\(")
_CALL_MAY_OPEN = re.compile(r"\[\s*(?:[A-Za-z_][A-Za-z0-9_]*\s*)?\Z")


class _NotLiteral(Exception):
    """A value that JSON cannot carry exactly, or that is code rather than data."""


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None or isinstance(value, (bool, str, int)):
            return value
        if isinstance(value, float) and math.isfinite(value):
            return value
        raise _NotLiteral  # bytes, complex, Ellipsis, inf
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        number = node.operand.value if isinstance(node.operand, ast.Constant) else None
        if isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number):
            return -number if isinstance(node.op, ast.USub) else number
        raise _NotLiteral
    if isinstance(node, ast.List):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        result: dict[str, Any] = {}
        for key, item in zip(node.keys, node.values, strict=True):
            if key is None:  # {**other}
                raise _NotLiteral
            name = _literal(key)
            if not isinstance(name, str):
                raise _NotLiteral
            result[name] = _literal(item)
        return result
    raise _NotLiteral


def _parse_tree(text: str) -> ast.expr | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. SyntaxWarning for "\d" in a model's string
            return ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def python_literal(text: str) -> Any:
    """The JSON-safe value of a Python literal (``{'k': 'v'}``, ``[1, None]``), else ``INVALID``.

    For formats whose values are bare text that models sometimes write as Python: parsed with
    ``ast`` and never evaluated, with the same refusals as a pythonic call's arguments.
    """
    body = _parse_tree(text.strip())
    if body is None:
        return INVALID
    try:
        return _literal(body)
    except (_NotLiteral, RecursionError):
        return INVALID


def parse_call_list(text: str, tool_names: frozenset[str]) -> list[ParsedCall] | None:
    """The calls in ``[f(a=1), g()]``, or None unless every element is a valid call."""
    body = _parse_tree(text)
    if not isinstance(body, ast.List) or not body.elts:
        return None
    calls: list[ParsedCall] = []
    try:
        for node in body.elts:
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
                return None
            if node.func.id not in tool_names:
                return None
            arguments: dict[str, Any] = {}
            for keyword in node.keywords:
                if keyword.arg is None or keyword.arg in arguments:  # **kwargs, a repeated name
                    return None
                arguments[keyword.arg] = _literal(keyword.value)
            dumped = dump_arguments(arguments)
            if dumped is None:
                return None
            calls.append(ParsedCall(node.func.id, dumped))
    except (_NotLiteral, RecursionError):
        return None
    return calls


class PythonicParser(LeadingParser):
    OPENER = "["
    PREFIXES = (PYTHON_START,)
    SUFFIXES = (PYTHON_END,)
    __slots__ = ()

    def _make_span(self, start: int) -> Span:
        return PythonSpan(start)

    def _could_open(self, text: str, start: int) -> bool | None:
        """Text like ``[1]`` or ``[see here](url)`` is content at once, not held to its ``]``."""
        if _CALL_OPENS.match(text, start):
            return True
        return None if _CALL_MAY_OPEN.match(text, start) else False

    def _parse(self, text: str) -> Sequence[ParsedCall] | None:
        return parse_call_list(text, self._tool_names)
