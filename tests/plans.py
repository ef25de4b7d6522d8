"""``GenerationPlan``s for unit tests of the core and the HTTP edge, without planning a request."""

from __future__ import annotations

from typing import Any

from gateway.backend.types import GenerationRequest
from gateway.core.generation_plan import GenerationPlan


def make_plan(*, prompts: int = 1, stream: bool = True, **fields: Any) -> GenerationPlan:
    """A plan for model ``m`` with ``prompts`` × ``n`` backend requests (one per choice); any field
    can be overridden."""
    n = fields.get("n", 1)
    requests = tuple(
        GenerationRequest(request_id=f"r-{i}", model="m", prompt=f"p{i // n}", sampling={}, stream=stream)
        for i in range(prompts * n)
    )
    values: dict[str, Any] = {
        "requests": requests,
        "request_id": "r",
        "chat": True,
        "stream": stream,
        "model_id": "m",
        "adapter": None,
        "completion_id": "chatcmpl-1",
        "created": 1700000000,
        "n": 1,
        "stops": (),
        "include_stop": False,
        "max_tokens": (16,) * prompts,
        "include_usage": False,
        "continuous_usage": False,
    }
    values.update(fields)
    return GenerationPlan(**values)
