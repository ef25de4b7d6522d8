"""The JSON schemas that make the forced parsers' shapes hold (``tool_choice`` named or required).

They sit beside the parsers because each is one half of a contract: the schema the backend's
structured outputs enforce, and the shape ``forced_named`` / ``forced_required`` read back. The
shapes are vLLM's, so a model served by vLLM directly answers the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


_COMPOSED = ("allOf", "$ref", "patternProperties", "unevaluatedProperties", "additionalProperties")
"""An object schema with any of these keys already says what else it admits, or gets its
properties from elsewhere (closing one ``allOf`` branch would refuse the others' properties)."""
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")


def closed(schema: Any) -> Any:
    """``schema`` with every object that lists ``properties`` and is silent on the rest closed
    (``additionalProperties: false``); a copy, the caller's schema is left alone.

    A forced call's arguments are enforced as a grammar, and an open object lets a small model
    invent key after key until ``max_tokens`` cuts the call, which then comes back as text. The
    function takes only the keys it declares anyway, which is what OpenAI's strict mode says.
    """
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed(sub) for name, sub in out[key].items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed(sub) for sub in out[key]]
    if isinstance(out.get("items"), dict):
        out["items"] = closed(out["items"])
    if isinstance(out.get("properties"), dict) and not any(key in out for key in _COMPOSED):
        out["additionalProperties"] = False
    return out


def named_call_schema(parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments object of the named function (its ``parameters``, closed; none means ``{}``)."""
    return closed(dict(parameters)) if parameters else dict(_NO_PARAMETERS)


def required_calls_schema(
    functions: Sequence[tuple[str, Mapping[str, Any] | None]], *, parallel: bool = True
) -> dict[str, Any]:
    """``[{"name": <one of the functions>, "parameters": <its schema>}, ...]``, at least one call.

    ``functions`` are (name, parameters schema) pairs. Each element is tied to one function by
    an ``anyOf`` branch, so a name never travels with another function's arguments. Closed
    (vLLM's leaves the call object open): a model that wanders into a key beside ``name`` and
    ``parameters`` writes something nobody reads, or runs to ``max_tokens``.
    ``parallel=False`` (``parallel_tool_calls: false``) allows exactly one call.
    """
    branches = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [name]},
                "parameters": named_call_schema(parameters),
            },
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for name, parameters in functions
    ]
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": branches}}
    if not parallel:
        schema["maxItems"] = 1
    return schema
