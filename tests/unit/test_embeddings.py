"""/v1/embeddings below the edge: planning's refusals and truncation, which models embed, the
backend contract, the core's order and cancellation, the replica pool's retry, the encodings."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from tokenizers import Tokenizer

from gateway.app import create_app
from gateway.backend.contracts.tensors import split_bytes
from gateway.backend.contracts.vllm import build_embedding_request, read_embedding
from gateway.backend.replicas.pool import ReplicaPool
from gateway.backend.replicas.router import Policy, Router
from gateway.backend.types import BackendModel, Embedding, EmbeddingRequest, GenerationChunk
from gateway.config import EndpointSpec, Settings
from gateway.core.admission import Admission
from gateway.core.embed import EmbeddingPlan, EmbeddingResult, run_embeddings
from gateway.core.service import CompletionService
from gateway.errors import (
    BackendError,
    BackendUnavailableError,
    ContextLengthExceededError,
    InvalidRequestError,
)
from gateway.metrics import Metrics
from gateway.models.catalog import ServedModel, embeds_by
from gateway.models.files import read_local_model_files
from gateway.models.tokens import TokenCounter
from gateway.openai.embeddings import encode_embeddings
from gateway.plan.embeddings import EmbeddingCreateRequest, prepare_embeddings
from tests.fakes import ScriptedBackend

pytestmark = pytest.mark.anyio
WEIGHTS = Path(__file__).resolve().parents[2] / "triton_models" / "weights" / "tiny-llm"
TOKENIZER = Tokenizer.from_file(str(WEIGHTS / "tokenizer.json"))
EMBED_INPUTS = frozenset({"embedding_request", "text_input"})


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Catalog:
    """What planning reads of the catalog: the snapshot and the counting threads."""

    def __init__(self, *models: ServedModel) -> None:
        self._models = {m.name: m for m in models}
        self.counter = TokenCounter(1)

    async def models(self) -> dict[str, ServedModel]:
        return self._models


def embedder(**fields: Any) -> ServedModel:
    values: dict[str, Any] = {
        "name": "e",
        "inputs": EMBED_INPUTS,
        "embeds": True,
        "tokenizer": TOKENIZER,
        "max_model_len": 64,
        "matryoshka_dimensions": (32, 64),
    }
    values.update(fields)
    return ServedModel(**values)


async def plan(model: ServedModel | None = None, **body: Any) -> EmbeddingPlan:
    request = EmbeddingCreateRequest.model_validate({"model": "e", **body})
    return await prepare_embeddings(request, "r", None, Catalog(model or embedder()), Settings(max_embedding_inputs=4))


async def refused(model: ServedModel | None = None, **body: Any) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        await plan(model, **body)
    return caught.value


async def test_every_input_shape_becomes_one_backend_request_per_input() -> None:
    assert [r.input for r in (await plan(input="a")).requests] == ["a"]
    assert [r.input for r in (await plan(input=["a", "b"])).requests] == ["a", "b"]
    assert [r.input for r in (await plan(input=[1, 2])).requests] == [[1, 2]]
    many = await plan(input=[[1, 2], [3]])
    assert [r.input for r in many.requests] == [[1, 2], [3]]
    assert [r.request_id for r in many.requests] == ["r-0", "r-1"]
    assert many.token_counts == (2, 1)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": []}, "input"),
        ({"input": ""}, "input"),
        ({"input": ["a", ""]}, "input"),
        ({"input": [[1], []]}, "input"),
        ({"input": ["a"] * 5}, "input"),
        ({"input": [1, 5000]}, "input"),
        ({"input": [-1]}, "input"),
        ({"input": "a", "normalize": False}, "normalize"),
        ({"input": "a", "dimensions": 0}, "dimensions"),
        ({"input": "a", "dimensions": 48}, "dimensions"),
        ({"input": "a", "truncate_prompt_tokens": 65}, "truncate_prompt_tokens"),
        ({"input": "a", "truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
    ],
)
async def test_refusals_name_the_field(body: dict[str, Any], param: str) -> None:
    assert (await refused(**body)).param == param


async def test_a_model_that_does_not_embed_is_refused_saying_so() -> None:
    error = await refused(embedder(embeds=False), input="a")
    assert error.param == "model" and error.code == "model_not_embedding" and "embeddings" in error.message


async def test_dimensions_need_a_matryoshka_model() -> None:
    error = await refused(embedder(matryoshka_dimensions=None), input="a", dimensions=32)
    assert "matryoshka" in error.message
    assert (await plan(embedder(matryoshka_dimensions=()), input="a", dimensions=7)).requests[0].dimensions == 7


async def test_token_ids_over_the_context_are_context_length_exceeded() -> None:
    with pytest.raises(ContextLengthExceededError):
        await plan(input=[1] * 65)


async def test_truncation_keeps_the_last_tokens_and_counts_them() -> None:
    text = "a few words that make more than three tokens"
    ids = TOKENIZER.encode(text, add_special_tokens=True).ids
    truncated = await plan(input=[text, "a"], truncate_prompt_tokens=3)
    assert [r.input for r in truncated.requests] == [ids[-3:], TOKENIZER.encode("a").ids]
    assert truncated.token_counts == (3, len(TOKENIZER.encode("a").ids))
    assert [r.input for r in (await plan(input=[[1, 2, 3, 4], [5]], truncate_prompt_tokens=3)).requests] == [
        [2, 3, 4],
        [5],
    ]
    whole = await plan(input=text, truncate_prompt_tokens=-1)
    assert whole.requests[0].input == ids
    assert (await refused(embedder(tokenizer=None), input=text, truncate_prompt_tokens=3)).param == (
        "truncate_prompt_tokens"
    )


def test_which_models_embed() -> None:
    vllm = frozenset({"text_input", "embedding_request", "sampling_parameters"})
    assert not embeds_by(vllm, None, None)  # the vLLM backend declares embedding_request on every model
    assert embeds_by(vllm, None, "pooling")
    assert embeds_by(vllm, "pooling", "generate")  # the setting wins
    assert not embeds_by(vllm, "generate", "pooling")
    assert embeds_by(frozenset({"embedding_request"}), None, None)
    assert not embeds_by(frozenset({"text_input"}), "pooling", "pooling")  # the tensor is a must


def test_model_json_says_runner_and_matryoshka_sizes(tmp_path: Path) -> None:
    version = tmp_path / "emb" / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(
        json.dumps({"model": str(WEIGHTS), "convert": "embed", "hf_overrides": {"matryoshka_dimensions": [8, 16]}})
    )
    files = read_local_model_files(tmp_path, "emb")
    assert files.runner == "pooling" and files.matryoshka_dimensions == (8, 16)
    (version / "model.json").write_text(json.dumps({"model": str(WEIGHTS), "hf_overrides": {"is_matryoshka": True}}))
    files = read_local_model_files(tmp_path, "emb")
    assert files.runner is None and files.matryoshka_dimensions == ()


def test_the_request_tensor_is_the_vllm_backends() -> None:
    request = EmbeddingRequest("id", "e", [1, 2], dimensions=32, inputs=EMBED_INPUTS)
    message = build_embedding_request(request)
    names = [tensor.name for tensor in message.inputs]
    assert names == ["text_input", "embedding_request", "return_num_input_tokens"]
    assert split_bytes(message.raw_input_contents[0]) == (b"",)
    body = orjson.loads(split_bytes(message.raw_input_contents[1])[0])
    assert body == {"input": [1, 2], "pooling_params": {"dimensions": [32]}}
    only = build_embedding_request(EmbeddingRequest("id", "e", "hi", inputs=frozenset({"embedding_request"})))
    assert [t.name for t in only.inputs] == ["embedding_request", "return_num_input_tokens"]
    assert orjson.loads(split_bytes(only.raw_input_contents[0])[0]) == {"input": "hi"}


def test_the_vector_is_read_from_the_final_response() -> None:
    chunk = GenerationChunk((b"[0.5, -0.25, 1]",), (None,), 3, None, None, True)
    assert read_embedding([chunk]) == Embedding([0.5, -0.25, 1], 3)
    with pytest.raises(BackendError):
        read_embedding([GenerationChunk((b"N/A",), (None,), None, None, None, True)])
    with pytest.raises(BackendError):
        read_embedding([])


class Backend:
    """Embeds after a delay that shrinks with the position, so answers arrive out of order."""

    def __init__(self, fail_at: str | None = None) -> None:
        self.fail_at = fail_at
        self.cancelled = 0

    async def embed(self, request: EmbeddingRequest) -> Embedding:
        text = str(request.input)
        try:
            await asyncio.sleep(0.0 if text == self.fail_at else 0.01 * (10 - len(text)))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if text == self.fail_at:
            raise InvalidRequestError("refused")
        return Embedding([float(len(text))], len(text))


def service(backend: Backend) -> CompletionService:
    admission = Admission(lambda _: (0, 8), 1.0)
    return CompletionService(backend, admission, Metrics(admission))  # type: ignore[arg-type]


def embedding_plan(*texts: str) -> EmbeddingPlan:
    requests = tuple(EmbeddingRequest(f"r-{i}", "e", t) for i, t in enumerate(texts))
    return EmbeddingPlan(requests, "r", "e", "float", (None,) * len(texts))


async def test_answers_keep_the_inputs_order_and_usage_sums() -> None:
    result = await run_embeddings(service(Backend()), embedding_plan("a", "bbb", "cc", "dddd"))
    assert result == EmbeddingResult([[1.0], [3.0], [2.0], [4.0]], 10)


async def test_one_failed_input_cancels_the_others() -> None:
    backend = Backend(fail_at="x")
    with pytest.raises(InvalidRequestError):
        await run_embeddings(service(backend), embedding_plan("a", "x", "b"))
    assert backend.cancelled == 2


def test_encodings() -> None:
    plan = EmbeddingPlan((EmbeddingRequest("r", "e", "a"),), "r", "m", "float")
    result = EmbeddingResult([[0.5, -1.0], [0.25, 2.0]], 7)
    body = orjson.loads(encode_embeddings(plan, result))
    assert body == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, -1.0]},
            {"object": "embedding", "index": 1, "embedding": [0.25, 2.0]},
        ],
        "model": "m",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    as_base64 = orjson.loads(encode_embeddings(EmbeddingPlan(plan.requests, "r", "m", "base64"), result))
    raw = base64.b64decode(as_base64["data"][1]["embedding"])
    assert raw == struct.pack("<2f", 0.25, 2.0)


class Replica:
    """A replica's backend: unavailable, or embedding with its own name in the vector."""

    def __init__(self, name: str, down: bool) -> None:
        self.name, self.down, self.calls = name, down, 0

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def list_models(self) -> list[BackendModel]:
        return [BackendModel("e")]

    async def embed(self, request: EmbeddingRequest) -> Embedding:
        self.calls += 1
        if self.down:
            raise BackendUnavailableError("down")
        return Embedding([1.0], 1)


async def test_the_pool_retries_an_unavailable_replica_once_elsewhere() -> None:
    replicas = {"a:1": Replica("a", down=True), "b:1": Replica("b", down=False)}
    pool = ReplicaPool(
        [EndpointSpec("a", 1, False), EndpointSpec("b", 1, False)],
        lambda address: replicas[address],  # type: ignore[arg-type,return-value]
        Router(Policy.ROUND_ROBIN, 1024, 1.25),
    )
    await pool._discover()
    for _ in range(2):
        assert await pool.embed(EmbeddingRequest("r", "e", "x")) == Embedding([1.0], 1)
    assert replicas["b:1"].calls == 2
    assert all(r.in_flight == 0 for r in pool.replicas)
    for replica in replicas.values():
        replica.down = True
    with pytest.raises(BackendUnavailableError):
        await pool.embed(EmbeddingRequest("r", "e", "x"))


class EmbeddingBackend(ScriptedBackend):
    """Serves ``e``, an embedding-only model (``embedding_request`` and no ``text_input``)."""

    async def list_models(self) -> list[BackendModel]:
        return [BackendModel(name="e", inputs=frozenset({"embedding_request"}))]


async def post_embeddings(tmp_path: Path, body: dict[str, Any]) -> httpx.Response:
    app = create_app(Settings(model_repository=[tmp_path]), backend=EmbeddingBackend())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return await client.post("/v1/embeddings", json=body)


async def test_the_route_answers_in_order_with_usage(tmp_path: Path) -> None:
    reply = await post_embeddings(tmp_path, {"model": "e", "input": ["aaa", "b"], "user": "u", "extra": 1})
    assert reply.status_code == 200
    assert reply.json() == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [3.0, 0.0]},
            {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]},
        ],
        "model": "e",
        "usage": {"prompt_tokens": 4, "total_tokens": 4},
    }


async def test_a_malformed_input_names_the_shapes(tmp_path: Path) -> None:
    reply = await post_embeddings(tmp_path, {"model": "e", "input": ["a", [1]]})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "input" and "a list of lists of token ids" in error["message"]


async def test_a_client_that_leaves_cancels_the_inputs_still_running(tmp_path: Path) -> None:
    from tests.unit.test_app import asgi_call, body_message

    backend = EmbeddingBackend(delay=1.0)
    app = create_app(Settings(model_repository=[tmp_path]), backend=backend)
    async with app.router.lifespan_context(app):
        request = [body_message({"model": "e", "input": ["a", "b"]})]
        status, _ = await asyncio.wait_for(asgi_call(app, "/v1/embeddings", request, 0.1), 0.8)  # inputs: 1 s
        assert status == 499
        assert app.state.components.service.admission.in_flight == 0
