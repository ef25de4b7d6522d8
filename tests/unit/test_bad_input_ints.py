"""Numbers no backend tensor carries, on a model whose tokenizer the gateway has not found: a 400
naming the field from planning, never a 500 from the contract that encodes the request. The backend
runs the real vLLM contract (``infer_request_bytes``) on what planning lets through, so a value it
cannot write fails the request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.backend.contracts.vllm import infer_request_bytes
from gateway.backend.types import GenerationRequest
from gateway.config import Settings
from tests.fakes import FakeStream, ScriptedBackend, text_chunks

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class EncodingBackend(ScriptedBackend):
    """Builds each generation's Triton message as the real backend does before answering."""

    def generate(self, request: GenerationRequest) -> FakeStream:
        infer_request_bytes(request)
        return super().generate(request)


async def post(tmp_path: Path, path: str, body: dict[str, Any]) -> httpx.Response:
    backend = EncodingBackend(text_chunks(b"ok"))
    app = create_app(Settings(model_repository=[tmp_path]), backend=backend)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return await client.post(path, json=body)


async def test_the_encoding_backend_serves_a_sound_request(tmp_path: Path) -> None:
    reply = await post(tmp_path, "/v1/completions", {"model": "m", "prompt": "hi", "top_k": 5, "stop_token_ids": [7]})
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("top_k", 10**30),
        ("min_tokens", 2**63),
        ("max_tokens", 2**64),
        ("truncate_prompt_tokens", 2**40),
        ("stop_token_ids", [2**64]),
        ("stop_token_ids", [2**31]),
        ("allowed_token_ids", [1, 2**63]),
    ],
)
async def test_numbers_past_int32_are_a_400_naming_the_field(tmp_path: Path, field: str, value: Any) -> None:
    reply = await post(tmp_path, "/v1/completions", {"model": "m", "prompt": "hi", field: value})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and field in (error["param"] or "")
