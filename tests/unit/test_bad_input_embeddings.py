"""``/v1/embeddings`` with token ids no model has, on a model whose tokenizer the gateway has not
found: a 400 naming ``input`` from planning, never a 500 from the backend contract that writes
the ids as JSON. The backend here runs the real contract (``build_embedding_request``) on what
planning lets through, so an id it cannot write would fail the request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.backend.contracts.vllm import build_embedding_request
from gateway.backend.types import BackendModel, Embedding, EmbeddingRequest
from gateway.config import Settings
from gateway.plan.embeddings import MAX_TOKEN_ID
from tests.fakes import ScriptedBackend

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class EncodingBackend(ScriptedBackend):
    """Serves ``e`` (embeddings only, no tokenizer the gateway can read) and builds each request's
    Triton message as the real backend does before answering."""

    async def list_models(self) -> list[BackendModel]:
        return [BackendModel(name="e", inputs=frozenset({"embedding_request"}))]

    async def embed(self, request: EmbeddingRequest) -> Embedding:
        build_embedding_request(request)
        return await super().embed(request)


async def post(tmp_path: Path, body: dict[str, Any]) -> httpx.Response:
    app = create_app(Settings(model_repository=[tmp_path]), backend=EncodingBackend())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return await client.post("/v1/embeddings", json=body)


@pytest.mark.parametrize(
    "tokens",
    [[2**64], [2**63], [MAX_TOKEN_ID + 1], [-1], [-(2**64)], [[1, 2], [3, 2**64]]],
    ids=["2**64", "2**63", "over-int32", "negative", "very-negative", "second-input"],
)
async def test_token_ids_no_model_has_are_a_400_naming_input(tmp_path: Path, tokens: list[Any]) -> None:
    reply = await post(tmp_path, {"model": "e", "input": tokens})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "input" and error["type"] == "invalid_request_error"
    assert "out of the model's vocabulary" in error["message"]


async def test_the_largest_id_planning_allows_reaches_the_backend(tmp_path: Path) -> None:
    reply = await post(tmp_path, {"model": "e", "input": [0, MAX_TOKEN_ID]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["prompt_tokens"] == 2
