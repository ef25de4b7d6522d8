"""``pythonic``: a Python list of calls, ``[get_weather(city="Paris"), other()]``.

Llama 4's native format (its pythonic prompt asks for ``[func_name1(param=value, ...), ...]``)
and Llama 3.2's pythonic variant. The list must open the output, after optional whitespace and
``<|python_start|>``; ``<|python_end|>`` after it is dropped. It is parsed with ``ast``, never
evaluated: arguments must be keyword arguments whose values are literals (strings, numbers,
booleans, None as null, lists, dicts with string keys). Anything else (a variable, a call, a
positional argument, an f-string, a tuple) in a list read whole makes it all content.

Calls stream (``PythonCallList``): once an element says ``NAME(KEY=`` with NAME one of the
tools and the value beginning as a literal does (a quote, a digit, a sign, a bracket, ``True``,
``False``, ``None``, an ``r``/``u`` string prefix), or says ``NAME()``, the call opens, and its
keyword arguments follow as JSON as they settle (``python_args.PythonArguments``); it closes at
its ``)``, and the next element may open the same way. A Python list is only known valid once
it closes, so streaming commits early, as the JSON formats do once their arguments object
begins: from the first opening on the list is calls, and what turns out malformed (a value
that is no literal, a repeated keyword, an element that is no call, anything but ``,`` or
``]`` after a call) ends the calls there, with what was sent; the rest of the list, to where
its brackets balance or the end of the output, is not read. A list whose first element does
not open so (a positional argument, ``**kwargs``, a variable as the first value, a name the
request did not offer, an element in parentheses) is read whole when it closes, as above.
Waiting for the first value to begin keeps the commonest output that only looks like a call
list (a variable, an f-string, a positional argument) the content it was before anything
streamed.
"""

from __future__ import annotations

import ast
import math
import re
import warnings
from collections.abc import Sequence
from typing import Any

from gateway.tools.calls import INVALID, dump_arguments
from gateway.tools.parsers.python_args import PythonArguments, skip_blank
from gateway.tools.scan import PythonSpan
from gateway.tools.stream import CallList, LeadingParser, Span
from gateway.tools.types import ParsedCall

PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"

_CALL_OPENS = re.compile(r"\[\s*[A-Za-z_][A-Za-z0-9_]*\s*\(")
_CALL_MAY_OPEN = re.compile(r"\[\s*(?:[A-Za-z_][A-Za-z0-9_]*\s*)?\Z")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYWORD = re.compile(r"[^\W\d]\w*")
_WORD = re.compile(r"\w+")
_LITERAL_STARTS = frozenset("\"'[{(+-.0123456789")
_WAIT: Any = object()
"""``_call_head``'s answer while the text ends before the head can be told."""


class _NotLiteral(Exception):
    """A value that JSON cannot carry exactly, or that is code rather than data."""


def _printable(value: int) -> int:
    """``value``, unless it has more digits than Python prints (a ``0x`` literal thousands of
    digits long): JSON could not spell it."""
    if value.bit_length() > 64:
        try:
            repr(value)
        except ValueError:
            raise _NotLiteral from None
    return value


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return _printable(value)
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


def _literal_begins(text: str, pos: int) -> Any:
    """Whether a literal begins at ``pos`` (a keyword's value): True, False, or ``_WAIT``."""
    if text[pos] in _LITERAL_STARTS:
        return True
    word = _WORD.match(text, pos)
    if word is None:
        return False
    end = word.end()
    if end == len(text):
        return _WAIT
    if text[end] in "'\"":
        return word.group().lower() in ("r", "u")
    return word.group() in ("True", "False", "None")


def _call_head(text: str, pos: int, tool_names: frozenset[str]) -> Any:
    """Where the call of the list element at ``pos`` opens: (its function, the index after
    its ``(``) once the element says ``NAME(KEY=`` and a literal, or ``NAME()``, with NAME one
    of the tools; None when it cannot; ``_WAIT`` while the text ends before that is known."""
    at = skip_blank(text, pos)
    if at is None or at == len(text):
        return _WAIT
    name = _NAME.match(text, at)
    if name is None:
        return None
    if name.end() == len(text):
        return _WAIT
    if name.group() not in tool_names:
        return None
    at = skip_blank(text, name.end())
    if at is None or at == len(text):
        return _WAIT
    if text[at] != "(":
        return None
    start = at + 1
    at = skip_blank(text, start)
    if at is None or at == len(text):
        return _WAIT
    if text[at] == ")":
        return name.group(), start
    key = _KEYWORD.match(text, at)
    if key is None:
        return None  # positional, *args, **kwargs
    at = skip_blank(text, key.end())
    if at is None or at == len(text):
        return _WAIT
    if text[at] != "=":
        return None
    at = skip_blank(text, at + 1)
    if at is None or at == len(text):
        return _WAIT
    begins = _literal_begins(text, at)
    if begins is _WAIT:
        return _WAIT
    return (name.group(), start) if begins else None


_ELEMENT, _ARGUMENTS, _SEPARATOR, _DROP = range(4)


class PythonCallList:
    """A Python list of calls, each streamed as it arrives (``CallList``; the module's rules).

    While no call has opened, an element that cannot open makes ``whole`` true, and the caller
    reads the list whole. Once one has, the list is calls: the first thing out of place ends
    them, and the rest, to where the list's brackets balance, is dropped.
    """

    __slots__ = ("_arguments", "_next", "_span", "_stage", "_tool_names", "opened", "whole")

    def __init__(self, start: int, tool_names: frozenset[str]) -> None:
        self._span = PythonSpan(start)
        self._tool_names = tool_names
        self._next = start + 1
        self._stage = _ELEMENT
        self._arguments: PythonArguments | None = None
        self.opened = False
        self.whole = False

    def advance(self, buf: str, final: bool, out: list[ParsedCall]) -> int | None:
        while not self.whole:
            stage = self._stage
            if stage == _DROP:
                end = self._span.end(buf)
                return end if end is not None else len(buf) if final else None
            if stage == _ARGUMENTS:
                if not self._settle(buf, final, out):
                    return None
                continue
            at = skip_blank(buf, self._next)
            if at is None or at == len(buf):
                if not final:
                    return None
                self._give_up()
                continue
            if stage == _SEPARATOR or (self.opened and buf[at] == "]"):
                if buf[at] == "]":
                    return at + 1
                if buf[at] != ",":
                    self._give_up()
                    continue
                self._next, self._stage = at + 1, _ELEMENT
                continue
            if not self._open(buf, at, final, out):
                return None
        return None

    def _open(self, buf: str, at: int, final: bool, out: list[ParsedCall]) -> bool:
        """Open the call of the element at ``at`` when its head allows, else give up; False
        while the head cannot be told yet."""
        head = _call_head(buf, at, self._tool_names)
        if head is _WAIT and not final:
            self._next = at
            return False
        if head is None or head is _WAIT:
            self._give_up()
            return True
        name, start = head
        out.append(ParsedCall(name, "", closes=False))
        self._arguments = PythonArguments(start)
        self.opened, self._stage = True, _ARGUMENTS
        return True

    def _settle(self, buf: str, final: bool, out: list[ParsedCall]) -> bool:
        """The open call's next piece; True once it closed (at its ``)``, or where its
        arguments stopped making sense, or at the end of the output)."""
        arguments = self._arguments
        assert arguments is not None
        if not (arguments.done or arguments.failed):
            piece = arguments.advance(buf, final)
            if piece:
                out.append(ParsedCall("", piece, opens=False, closes=False))
            if not (arguments.done or arguments.failed or final):
                return False
        out.append(ParsedCall("", "", opens=False, closes=True))
        self._arguments = None
        if arguments.done:
            self._next, self._stage = arguments.end, _SEPARATOR
        else:
            self._stage = _DROP
        return True

    def _give_up(self) -> None:
        if self.opened:
            self._stage = _DROP
        else:
            self.whole = True


class PythonicParser(LeadingParser):
    OPENER = "["
    PREFIXES = (PYTHON_START,)
    SUFFIXES = (PYTHON_END,)
    __slots__ = ()

    def _make_span(self, start: int) -> Span:
        return PythonSpan(start)

    def _call_list(self, start: int) -> CallList:
        return PythonCallList(start, self._tool_names)

    def _could_open(self, text: str, start: int) -> bool | None:
        """Text like ``[1]`` or ``[see here](url)`` is content at once, not held to its ``]``."""
        if _CALL_OPENS.match(text, start):
            return True
        return None if _CALL_MAY_OPEN.match(text, start) else False

    def _parse(self, text: str) -> Sequence[ParsedCall] | None:
        return parse_call_list(text, self._tool_names)
