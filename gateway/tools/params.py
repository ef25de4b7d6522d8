"""Parameter types from the tools' JSON schemas, for formats whose argument values are bare text.

Qwen3-Coder's ``<parameter=city>\\nParis\\n</parameter>`` and GLM's ``<arg_value>3</arg_value>``
carry no JSON types: ``3`` may be the number or the string, and only the function's schema says
which. ``tool_params`` reduces each request's schemas to what typing needs (a kind and whether
null is allowed, per parameter), in a hashable shape so the plan that carries it stays hashable;
``qwen3_value`` and ``glm_value`` type one value the way vLLM's parsers for those formats do, so a
model answers the same through either server.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.tools.calls import INVALID, load_json
from gateway.tools.parsers.pythonic import python_literal

STRING, INTEGER, NUMBER, BOOLEAN, CONTAINER, OTHER = "string", "integer", "number", "boolean", "container", "other"


@dataclass(frozen=True, slots=True)
class ParamType:
    """What a parameter's schema says about its value, reduced to what typing a text needs."""

    kind: str
    """``string``, ``integer``, ``number``, ``boolean``, ``container`` (object or array) or
    ``other`` (a type this module does not know, or ``null`` alone)."""
    nullable: bool
    """The schema admits null (``"type": "null"``, ``["string", "null"]``, an ``anyOf`` branch)."""


ToolParams = tuple[tuple[str, tuple[tuple[str, ParamType], ...]], ...]
"""(function name, ((parameter name, its type), ...)) per tool whose schema lists properties."""

_STRING_NAMES = frozenset({"string", "str", "text", "varchar", "char", "enum"})
_INTEGER_PREFIXES = ("int", "uint", "long", "short", "unsigned")
_NUMBER_PREFIXES = ("num", "float")
_BOOLEAN_NAMES = frozenset({"boolean", "bool", "binary"})
_NULL_WORDS = frozenset({"null", "none"})


def _kind(name: str) -> str:
    """A schema type name as a kind; vLLM's spellings (``int64``, ``float``, ``dict``) included,
    since fine-tuned tools are written by hand and use them."""
    if name in _STRING_NAMES:
        return STRING
    if name.startswith(_INTEGER_PREFIXES):
        return INTEGER
    if name.startswith(_NUMBER_PREFIXES):
        return NUMBER
    if name in _BOOLEAN_NAMES:
        return BOOLEAN
    if name in ("object", "array", "arr") or name.startswith(("dict", "list")):
        return CONTAINER
    return OTHER


def _first_type(options: Iterable[Any], only_null: str) -> ParamType:
    """The first type that is not null among ``options`` (type names), and whether null is one;
    ``only_null`` is the kind when no other type is named."""
    kind, nullable = "", False
    for option in options:
        name = str(option).strip().lower()
        if name == "null":
            nullable = True
        elif not kind:
            kind = _kind(name)
    return ParamType(kind or (only_null if nullable else STRING), nullable)


def param_type(schema: Any) -> ParamType:
    """One property's type. No ``type`` and no ``anyOf`` means a string, as vLLM reads it."""
    if not isinstance(schema, Mapping):
        return ParamType(STRING, False)
    declared = schema.get("type")
    if declared is not None:
        return _first_type(declared if isinstance(declared, list) else [declared], OTHER)
    branches = schema.get("anyOf")
    if isinstance(branches, list):
        kinds = [branch["type"] for branch in branches if isinstance(branch, Mapping) and "type" in branch]
        return _first_type(kinds, STRING)
    return ParamType(STRING, False)


def tool_params(functions: Iterable[tuple[str, Mapping[str, Any] | None]]) -> ToolParams:
    """The parameter types of (name, parameters schema) pairs; tools without properties are left
    out (every value of theirs is then untyped)."""
    out: list[tuple[str, tuple[tuple[str, ParamType], ...]]] = []
    for name, parameters in functions:
        properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
        if isinstance(properties, Mapping) and properties:
            out.append((name, tuple((key, param_type(sub)) for key, sub in properties.items())))
    return tuple(out)


def params_by_tool(params: ToolParams) -> dict[str, dict[str, ParamType]]:
    """``params`` as nested lookups (a parser builds this once per choice)."""
    return {name: dict(types) for name, types in params}


def _number(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return INVALID
    if not math.isfinite(value):
        return INVALID
    return int(value) if value.is_integer() else value


def _container(text: str) -> Any:
    value = load_json(text)
    if value is INVALID:
        return python_literal(text)
    if isinstance(value, str):  # a JSON string holding a Python literal: "{'k': 'v'}"
        inner = python_literal(value)
        return value if inner is INVALID else inner
    return value


def qwen3_value(text: str, declared: ParamType | None) -> Any:
    """A Qwen3-Coder parameter's value, typed by its schema (None: not in the schema, a string).

    As vLLM's ``qwen3_coder``: ``null``/``None`` is null for a nullable or non-string parameter;
    integers with ``int()``; numbers with ``float()``, whole ones as integers; objects and arrays
    as JSON, else Python literals; unknown types as Python literals. Text that does not parse as
    its type stays the string the model wrote, booleans included (vLLM turns a boolean it cannot
    read into ``false``, which would hand the tool a value the model never chose).
    """
    if declared is None:
        return text
    lowered = text.lower()
    if declared.nullable and lowered in _NULL_WORDS:
        return None
    kind = declared.kind
    if kind == STRING:
        return text
    if lowered in _NULL_WORDS:
        return None
    if kind == INTEGER:
        try:
            return int(text)
        except ValueError:
            return text
    if kind == BOOLEAN:
        return lowered == "true" if lowered in ("true", "false") else text
    value = _number(text) if kind == NUMBER else _container(text) if kind == CONTAINER else python_literal(text)
    return text if value is INVALID else value


def glm_value(text: str, declared: ParamType | None) -> Any:
    """A GLM ``<arg_value>``, typed as vLLM's ``glm45`` does: a parameter the schema declares a
    string stays text; any other (a parameter the schema does not list included) is JSON, else a
    Python literal, else the text itself."""
    if declared is not None and declared.kind == STRING:
        return text
    value = load_json(text)
    if value is INVALID:
        value = python_literal(text)
    return text if value is INVALID else value


_NULL_PREFIXES = ("null", "none")
_PLAIN = re.compile(r'[^"\\\x00-\x1f]*')
"""Text that stands for itself inside a JSON string (``json.dumps`` with ``ensure_ascii`` off)."""


class TypedObject:
    """The JSON arguments of a call whose values are bare text (Qwen3-Coder's, GLM's), written
    as they settle, so they can stream.

    A value whose parameter is a string (``streams``) goes out a piece at a time as a JSON
    string; for a nullable string, not before its text can no longer be ``null``/``None``
    (which types as null). Any other value waits until its text is whole, then is typed by
    ``typer`` as the whole-block parse types it. A repeated key is refused (``begin``): a dict
    would keep its first place with the last value, which a stream cannot take back.
    """

    __slots__ = ("_held", "_key", "_keys", "_open", "_typer", "_types", "_untyped_string")

    def __init__(
        self,
        types: Mapping[str, ParamType],
        typer: Callable[[str, ParamType | None], Any],
        *,
        untyped_string: bool,
    ) -> None:
        self._types = types
        self._typer = typer
        self._untyped_string = untyped_string
        """A parameter the schema does not list is a string (Qwen3-Coder) or typed (GLM)."""
        self._keys: set[str] = set()
        self._key = ""
        self._open = False
        self._held = ""

    def begin(self, key: str) -> bool:
        """A parameter starts; False when its key was seen before."""
        if key in self._keys:
            return False
        self._keys.add(key)
        self._key, self._open, self._held = key, False, ""
        return True

    @property
    def streams(self) -> bool:
        declared = self._types.get(self._key)
        return declared.kind == STRING if declared is not None else self._untyped_string

    def text(self, chunk: str) -> str:
        """A settled piece of a value that ``streams``: the JSON to send for it."""
        if self._open:
            if _PLAIN.fullmatch(chunk):
                return chunk  # nothing in it that JSON escapes: the per-token case
            return json.dumps(chunk, ensure_ascii=False)[1:-1]
        held = self._held + chunk
        declared = self._types.get(self._key)
        if declared is not None and declared.nullable and any(w.startswith(held.lower()) for w in _NULL_PREFIXES):
            self._held = held
            return ""
        self._open, self._held = True, ""
        return self._prefix() + json.dumps(held, ensure_ascii=False)[:-1]

    def end(self, value: str) -> str:
        """The value's whole text is ``value``: the JSON still to send for it."""
        if self._open:
            return '"'
        return self._prefix() + json.dumps(self._typer(value, self._types.get(self._key)), ensure_ascii=False)

    def _prefix(self) -> str:
        return (", " if len(self._keys) > 1 else "") + json.dumps(self._key, ensure_ascii=False) + ": "
