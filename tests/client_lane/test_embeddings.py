"""Embeddings through the clients people use: the ``openai`` SDK's ``embeddings.create``,
LangChain's ``OpenAIEmbeddings`` and LlamaIndex's ``OpenAILikeEmbedding``, against
``tiny-llm-embed`` on the embedded default.

LangChain's ``OpenAIEmbeddings`` checks lengths with tiktoken by default and then sends
tiktoken's token ids, not text. Those ids belong to OpenAI's vocabulary, not the model's: the
gateway cannot tell them from real ids, and refuses those out of the model's vocabulary with a
400 naming the id. With ``check_embedding_ctx_length=False`` it sends the text, which is what a
model served here needs (docs/API.md, "Embeddings").
"""

from __future__ import annotations

import math

import httpx
import openai
import pytest
from langchain_openai import OpenAIEmbeddings
from llama_index.embeddings.openai_like import OpenAILikeEmbedding

from tests.client_lane.common import Recorder

EMBED = "tiny-llm-embed"
TEXTS = ["first document", "second document", "a question"]


def unit(vector: list[float]) -> bool:
    return len(vector) == 128 and math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-4)


@pytest.fixture(scope="module")
def reference(base_url: str) -> list[list[float]]:
    """The vectors as the gateway gives them to a plain HTTP client."""
    reply = httpx.post(base_url + "/embeddings", json={"model": EMBED, "input": TEXTS}, timeout=60)
    reply.raise_for_status()
    return [item["embedding"] for item in reply.json()["data"]]


def close(a: list[float], b: list[float]) -> bool:
    return all(abs(x - y) < 1e-6 for x, y in zip(a, b, strict=True))


def test_openai_sdk_embeddings_create(base_url: str, reference: list[list[float]]) -> None:
    with openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        response = client.embeddings.create(model=EMBED, input=TEXTS)  # base64 on the wire, decoded by the SDK
        assert [d.index for d in response.data] == [0, 1, 2]
        assert all(close(d.embedding, r) for d, r in zip(response.data, reference, strict=True))
        assert response.usage.prompt_tokens == response.usage.total_tokens > 0
        small = client.embeddings.create(model=EMBED, input="a question", dimensions=32)
        assert len(small.data[0].embedding) == 32


def test_langchain_openai_embeddings_with_text(base_url: str, reference: list[list[float]]) -> None:
    recorder = Recorder()
    embeddings = OpenAIEmbeddings(
        model=EMBED,
        base_url=base_url,
        api_key="unused",
        max_retries=0,
        check_embedding_ctx_length=False,
        http_client=recorder.sync(),
    )
    documents = embeddings.embed_documents(TEXTS)
    query = embeddings.embed_query(TEXTS[2])
    assert all(close(d, r) for d, r in zip(documents, reference, strict=True))
    assert close(query, reference[2]) and unit(query)
    sent = [body["input"] for body in recorder.bodies()]
    assert sent and all(isinstance(text, str) for item in sent for text in (item if isinstance(item, list) else [item]))


def test_langchain_token_ids_outside_the_vocabulary_get_a_400_naming_one(base_url: str) -> None:
    # What OpenAIEmbeddings sends by default: tiktoken's cl100k ids of the text.
    with openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError, match="out of the model's vocabulary"):
            client.embeddings.create(model=EMBED, input=[[3983, 2246]])


def test_llamaindex_openai_like_embedding(base_url: str, reference: list[list[float]]) -> None:
    embedding = OpenAILikeEmbedding(model_name=EMBED, api_base=base_url, api_key="unused", max_retries=0)
    assert close(embedding.get_text_embedding(TEXTS[0]), reference[0])
    batch = embedding.get_text_embedding_batch(TEXTS)
    assert all(close(b, r) for b, r in zip(batch, reference, strict=True))
    assert unit(embedding.get_query_embedding(TEXTS[2]))
