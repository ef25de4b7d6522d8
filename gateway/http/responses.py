"""The JSON response class of the HTTP edge: bodies encoded with orjson."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


class JSONBytesResponse(Response):
    """JSON encoded with orjson (faster than the stdlib, and it emits UTF-8 as is)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
