"""JSON bytes of what a client sent back to it: orjson, or the standard library where orjson refuses.

An answer that echoes request fields (the Responses object's ``text``, ``tools``, ``metadata``)
can hold what the request's parser (the standard library's) accepted and orjson cannot write: an
integer beyond 64 bits (a JSON schema's ``maximum``) or a lone surrogate escape. Such an answer is
written by the standard library, ASCII-escaped, instead of failing with a 500. orjson stays the
path of every ordinary answer: the fallback costs only when it is needed.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode()
