"""The JSON text in the store's ``response`` and ``input_items`` columns.

orjson writes it (compact UTF-8, fast on responses of megabytes). orjson refuses two things that
a request parsed by the standard library can still carry: a lone surrogate in a string (JSON's
``"\\ud800"`` escape) and an integer beyond 64 bits. Those documents are written by the standard
library instead, ASCII-escaped, and marked with one leading space: still valid JSON for anyone
reading the column, and the mark sends them back through the standard library, since orjson would
refuse the surrogate or silently turn the big integer into a float.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from gateway.store.base import StoredResponse

_STDLIB_MARK = " "


def dump_json(value: Any) -> str:
    """``value`` as JSON text (``TypeError``/``ValueError`` for what JSON cannot hold)."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return _STDLIB_MARK + json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def load_json(text: str) -> Any:
    """The value :func:`dump_json` wrote."""
    if text.startswith(_STDLIB_MARK):
        return json.loads(text)
    return orjson.loads(text)


def to_row(stored: StoredResponse) -> tuple[str, str, float, str | None, str, str]:
    """The put statement's parameters, in its column order."""
    return (
        stored.id,
        stored.owner,
        stored.created_at,
        stored.previous_response_id,
        dump_json(stored.response),
        dump_json(stored.input_items),
    )


def from_row(response_id: str, owner: str, row: Any) -> StoredResponse:
    """A get statement's row (created_at, previous id, response, input items) back as a record."""
    created_at, previous, response, input_items = row
    return StoredResponse(response_id, owner, created_at, load_json(response), load_json(input_items), previous)
