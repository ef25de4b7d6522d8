"""``/v1/embeddings`` end to end: the gateway over real HTTP, a real tritonserver running the
reference embedding model (``tiny-llm-embed``), the official SDK and raw httpx."""

from __future__ import annotations

import base64
import math
import struct
from pathlib import Path

import httpx
import openai
import pytest
from tokenizers import Tokenizer

from tests.integration.conftest import ROOT, GatewayProcess

EMBED = "tiny-llm-embed"
HIDDEN = 128
TOKENIZER = Tokenizer.from_file(str(ROOT / "triton_models" / "weights" / "tiny-llm" / "tokenizer.json"))


def ids(text: str) -> list[int]:
    return list(TOKENIZER.encode(text, add_special_tokens=True).ids)


def post(gateway: GatewayProcess, **body: object) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/embeddings", json={"model": EMBED, **body}, timeout=60)


def close(a: list[float], b: list[float], tol: float = 1e-5) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def test_models_lists_the_embedding_model(client: openai.OpenAI) -> None:
    assert EMBED in {m.id for m in client.models.list().data}


def test_sdk_string_input_answers_one_normalized_vector_with_usage(client: openai.OpenAI) -> None:
    response = client.embeddings.create(model=EMBED, input="hello world", encoding_format="float")
    assert response.object == "list" and response.model == EMBED
    [item] = response.data
    assert item.index == 0 and item.object == "embedding" and len(item.embedding) == HIDDEN
    assert math.isclose(math.sqrt(sum(x * x for x in item.embedding)), 1.0, rel_tol=1e-5)
    assert response.usage.prompt_tokens == len(ids("hello world"))
    assert response.usage.total_tokens == response.usage.prompt_tokens


def test_every_input_shape_gives_the_same_vector_for_the_same_tokens(gateway: GatewayProcess) -> None:
    text = "the same words"
    single = post(gateway, input=text).json()["data"][0]["embedding"]
    listed = post(gateway, input=[text]).json()["data"][0]["embedding"]
    tokens = post(gateway, input=ids(text)).json()
    token_lists = post(gateway, input=[ids(text), ids(text)]).json()
    assert close(single, listed)
    assert close(single, tokens["data"][0]["embedding"])
    assert [d["index"] for d in token_lists["data"]] == [0, 1]
    assert all(close(single, d["embedding"]) for d in token_lists["data"])
    assert tokens["usage"]["prompt_tokens"] == len(ids(text))
    assert token_lists["usage"]["prompt_tokens"] == 2 * len(ids(text))


def test_batch_answers_in_input_order(gateway: GatewayProcess) -> None:
    texts = [f"input number {i} " + "x" * (i % 7) for i in range(24)]
    batch = post(gateway, input=texts).json()
    alone = {t: post(gateway, input=t).json()["data"][0]["embedding"] for t in (texts[0], texts[5], texts[23])}
    assert [d["index"] for d in batch["data"]] == list(range(24))
    for position in (0, 5, 23):
        assert close(batch["data"][position]["embedding"], alone[texts[position]])
    assert batch["usage"]["prompt_tokens"] == sum(len(ids(t)) for t in texts)


def test_base64_decodes_to_the_float_vector(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    floats = post(gateway, input="encode me", encoding_format="float").json()["data"][0]["embedding"]
    raw = post(gateway, input="encode me", encoding_format="base64").json()["data"][0]["embedding"]
    decoded = list(struct.unpack(f"<{HIDDEN}f", base64.b64decode(raw)))
    assert close(decoded, floats, tol=1e-6)
    # The SDK asks for base64 by default and decodes it itself.
    via_sdk = client.embeddings.create(model=EMBED, input="encode me").data[0].embedding
    assert close(list(via_sdk), floats, tol=1e-6)


def test_dimensions_cut_and_renormalize(gateway: GatewayProcess) -> None:
    full = post(gateway, input="matryoshka").json()["data"][0]["embedding"]
    cut = post(gateway, input="matryoshka", dimensions=32).json()["data"][0]["embedding"]
    norm = math.sqrt(sum(x * x for x in full[:32]))
    assert len(cut) == 32 and close(cut, [x / norm for x in full[:32]])


def test_dimensions_the_model_does_not_allow_is_400(gateway: GatewayProcess) -> None:
    response = post(gateway, input="matryoshka", dimensions=48)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "dimensions"
    assert "32, 64, 128" in response.json()["error"]["message"]


def test_truncate_prompt_tokens_keeps_the_last_tokens(gateway: GatewayProcess) -> None:
    text = "a long input that will be cut to its last few tokens"
    tail = ids(text)[-4:]
    truncated = post(gateway, input=text, truncate_prompt_tokens=4).json()
    assert truncated["usage"]["prompt_tokens"] == 4
    assert close(truncated["data"][0]["embedding"], post(gateway, input=tail).json()["data"][0]["embedding"])


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": []}, "input", "empty"),
        ({"input": ""}, "input", "empty"),
        ({"input": ["ok", ""]}, "input", "empty"),
        ({"input": [[1, 2], []]}, "input", "empty"),
        ({"input": [1, 99999]}, "input", "vocabulary"),
        ({"input": "x", "normalize": False}, "normalize", "normalize"),
        ({"input": "x", "encoding_format": "int8"}, None, ""),
        ({"input": "x", "truncate_prompt_tokens": 100000}, "truncate_prompt_tokens", "max_model_len"),
    ],
)
def test_refusals_are_openai_shaped_400s(
    gateway: GatewayProcess, body: dict[str, object], param: str | None, words: str
) -> None:
    response = post(gateway, **body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param and words in error["message"]


def test_token_ids_over_the_context_are_400(gateway: GatewayProcess) -> None:
    response = post(gateway, input=[5] * 2049)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


def test_a_model_that_cannot_embed_is_400_saying_so(gateway: GatewayProcess) -> None:
    response = httpx.post(gateway.url + "/v1/embeddings", json={"model": "tiny-llm", "input": "x"}, timeout=30)
    assert response.status_code == 400
    assert "does not serve embeddings" in response.json()["error"]["message"]
    assert response.json()["error"]["param"] == "model"


def test_chat_on_the_embedding_model_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="embedding model"):
        client.chat.completions.create(model=EMBED, messages=[{"role": "user", "content": "x"}], max_tokens=2)


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no-such-model", input="x")


def test_too_many_inputs_is_400(tmp_path: Path, triton) -> None:  # type: ignore[no-untyped-def]
    from tests.integration.conftest import start_gateway, stop_gateway

    capped = start_gateway(triton.grpc_url, tmp_path / "gateway.log", "--max-embedding-inputs", "3")
    try:
        assert post(capped, input=["a", "b", "c"]).status_code == 200
        response = post(capped, input=["a", "b", "c", "d"])
        assert response.status_code == 400 and "at most 3" in response.json()["error"]["message"]
    finally:
        stop_gateway(capped)


def test_requests_are_counted_once_by_status(gateway: GatewayProcess) -> None:
    def count(status: str, model: str) -> float:
        total = 0.0
        for line in httpx.get(gateway.url + "/metrics", timeout=10).text.splitlines():
            if (
                line.startswith("gateway_requests_total{")
                and 'endpoint="embeddings"' in line
                and f'status="{status}"' in line
                and f'model="{model}"' in line
            ):
                total += float(line.rsplit(" ", 1)[1])
        return total

    ok, refused = count("200", EMBED), count("400", "")
    assert post(gateway, input=["a", "b"]).status_code == 200
    assert post(gateway, input=[]).status_code == 400
    assert (count("200", EMBED), count("400", "")) == (ok + 1, refused + 1)
