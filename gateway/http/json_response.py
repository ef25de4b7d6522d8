"""The JSON response class of the HTTP edge: bodies encoded with orjson (``openai.jsonbytes``)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from gateway.openai.jsonbytes import dumps


class JSONBytesResponse(Response):
    """JSON encoded with orjson (faster than the stdlib, and it emits UTF-8 as is); what orjson
    cannot write (an echoed integer beyond 64 bits) by the standard library."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)
