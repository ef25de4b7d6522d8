"""/tokenize, /detokenize and /v1/responses/input_tokens at the HTTP edge, against an in-memory
backend: vLLM's and OpenAI's shapes, the ids of the rendered prompt, refusals naming the field,
auth like the other routes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer

from gateway.app import create_app
from gateway.config import Settings
from tests.fakes import ScriptedBackend
from tests.unit.test_app import WEIGHTS, make_repo

pytestmark = pytest.mark.anyio

TOKENIZER = Tokenizer.from_file(str(WEIGHTS / "tokenizer.json"))
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def post(
    tmp_path: Path, path: str, body: Any, *, backend: ScriptedBackend | None = None, **settings: Any
) -> httpx.Response:
    app = create_app(Settings(model_repository=[make_repo(tmp_path)], **settings), backend=backend or ScriptedBackend())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(path, json=body)


def ids(text: str) -> list[int]:
    return TOKENIZER.encode(text).ids


async def test_a_prompt_is_tokenized_in_vllms_shape(tmp_path: Path) -> None:
    answer = await post(tmp_path, "/tokenize", {"model": "m", "prompt": "hello world"})
    assert answer.status_code == 200
    tokens = ids("hello world")
    assert answer.json() == {"count": len(tokens), "max_model_len": 64, "tokens": tokens, "token_strs": None}


async def test_messages_are_tokenized_as_the_template_renders_them(tmp_path: Path) -> None:
    rendered = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    answer = await post(tmp_path, "/tokenize", {"model": "m", "messages": HI, "return_token_strs": True})
    body = answer.json()
    assert body["tokens"] == ids(rendered)
    assert body["count"] == len(body["tokens"])
    assert body["token_strs"] == [TOKENIZER.id_to_token(i) for i in ids(rendered)]
    assert body["token_strs"][0] == "<|im_start|>"


async def test_generation_prompt_and_continued_message_follow_the_chat_fields(tmp_path: Path) -> None:
    plain = await post(tmp_path, "/tokenize", {"model": "m", "messages": HI, "add_generation_prompt": False})
    assert plain.json()["tokens"] == ids("<|im_start|>user\nhi<|im_end|>\n")
    prefill = [*HI, {"role": "assistant", "content": "Sure"}]
    body = {"model": "m", "messages": prefill, "add_generation_prompt": False, "continue_final_message": True}
    continued = await post(tmp_path, "/tokenize", body)
    assert continued.json()["tokens"] == ids("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nSure")
    both = await post(tmp_path, "/tokenize", {**body, "add_generation_prompt": True})
    assert both.status_code == 400
    assert both.json()["error"]["param"] == "continue_final_message"


async def test_model_may_be_left_out_when_one_is_served(tmp_path: Path) -> None:
    answer = await post(tmp_path, "/tokenize", {"prompt": "hi"})
    assert answer.json()["tokens"] == ids("hi")
    several = await post(tmp_path, "/tokenize", {"prompt": "hi"}, backend=ScriptedBackend(models=("m", "other")))
    assert several.status_code == 400
    assert several.json()["error"]["param"] == "model"


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "nope", "prompt": "hi"}, 404, "model"),
        ({"model": "m"}, 400, "prompt"),
        ({"model": "m", "prompt": "hi", "messages": HI}, 400, "messages"),
        ({"model": "m", "messages": []}, 400, "messages"),
        ({"model": "m", "prompt": 3}, 400, "prompt"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, 400, "messages.0.role"),
        ({"model": "m", "messages": HI, "chat_template": "{{ 1 }}"}, 400, "chat_template"),
    ],
)
async def test_tokenize_refusals_name_the_field(tmp_path: Path, body: dict[str, Any], status: int, param: str) -> None:
    answer = await post(tmp_path, "/tokenize", body)
    assert answer.status_code == status
    assert answer.json()["error"]["param"] == param


async def test_detokenize_gives_the_text_back_with_special_tokens(tmp_path: Path) -> None:
    text = "<|im_start|>user\nhello wörld<|im_end|>"
    answer = await post(tmp_path, "/detokenize", {"model": "m", "tokens": ids(text)})
    assert answer.json() == {"prompt": text}


async def test_detokenize_refuses_ids_out_of_vocabulary(tmp_path: Path) -> None:
    answer = await post(tmp_path, "/detokenize", {"model": "m", "tokens": [5, TOKENIZER.get_vocab_size()]})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "tokens.1"
    assert "out of vocabulary" in answer.json()["error"]["message"]
    negative = await post(tmp_path, "/detokenize", {"model": "m", "tokens": [-1]})
    assert negative.status_code == 400
    assert negative.json()["error"]["param"] == "tokens.0"


async def test_input_tokens_in_openais_shape(tmp_path: Path) -> None:
    body = {"model": "m", "input": "hi", "instructions": "Be brief."}
    answer = await post(tmp_path, "/v1/responses/input_tokens", body)
    rendered = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert answer.json() == {"object": "response.input_tokens", "input_tokens": len(ids(rendered))}


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "nope", "input": "hi"}, 404, "model"),
        ({"model": "m"}, 400, "input"),
        ({"model": "m", "input": "hi", "conversation": "conv_1"}, 400, "conversation"),
        ({"model": "m", "input": "hi", "previous_response_id": "resp_nope"}, 400, "previous_response_id"),
        ({"model": "m", "input": [{"type": "message", "role": "user", "content": [{"type": "x"}]}]}, 400, None),
    ],
)
async def test_input_tokens_refusals_are_the_requests_own(
    tmp_path: Path, body: dict[str, Any], status: int, param: str | None
) -> None:
    answer = await post(tmp_path, "/v1/responses/input_tokens", body)
    assert answer.status_code == status, answer.text
    if param is not None:
        assert answer.json()["error"]["param"] == param


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize", "/v1/responses/input_tokens"])
async def test_counting_routes_need_the_api_key(tmp_path: Path, path: str) -> None:
    answer = await post(tmp_path, path, {"model": "m", "prompt": "hi", "tokens": [1], "input": "hi"}, api_keys="k")
    assert answer.status_code == 401


async def test_a_long_prompt_over_the_context_is_tokenized_and_decoded_back_off_the_loop(tmp_path: Path) -> None:
    prompt = "Once upon a time, " * 500  # past INLINE_MAX_CHARS both ways, and past max_model_len 64
    answer = (await post(tmp_path, "/tokenize", {"model": "m", "prompt": prompt})).json()
    assert answer["tokens"] == ids(prompt) and answer["count"] > answer["max_model_len"]
    back = await post(tmp_path, "/detokenize", {"model": "m", "tokens": answer["tokens"]})
    assert back.json() == {"prompt": prompt}
