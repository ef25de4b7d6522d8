"""plan/count.py: a chat request's count is the prompt planning counts for its generation (the
same rendered text, the same tokenizer), tools and long prompts included; refusals are chat's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from gateway.config import Settings
from gateway.errors import InvalidRequestError, ModelNotFoundError
from gateway.models.catalog import ModelCatalog
from gateway.plan.count import count_chat_prompt, count_prompt
from gateway.plan.prepare import RequestContext, prepare_chat
from gateway.plan.requests import ChatCompletionRequest
from tests.fakes import ScriptedBackend
from tests.unit.test_app import WEIGHTS

pytestmark = pytest.mark.anyio

TOKENIZER = Tokenizer.from_file(str(WEIGHTS / "tokenizer.json"))
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


MAX_MODEL_LEN = 2048


@pytest.fixture
async def catalog(tmp_path: Path) -> AsyncIterator[ModelCatalog]:
    version = tmp_path / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(json.dumps({"model": str(WEIGHTS), "max_model_len": MAX_MODEL_LEN}))
    catalog = ModelCatalog(
        ScriptedBackend(),  # type: ignore[arg-type]
        [tmp_path],
        token_count_cache_bytes=2**20,
    )
    await catalog.refresh()
    yield catalog
    catalog.close()


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    )


CASES = {
    "one turn": {},
    "multi-turn with a system prompt": {
        "messages": [
            {"role": "system", "content": "You are terse. " * 200},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi there"},
            {"role": "user", "content": "what now?"},
        ]
    },
    "tools": {"tools": TOOLS},
    "tools, chosen none": {"tools": TOOLS, "tool_choice": "none"},
    "no generation prompt": {"add_generation_prompt": False},
}


@pytest.mark.parametrize("fields", CASES.values(), ids=CASES.keys())
async def test_chat_count_is_the_prompt_planning_counts_for_the_generation(
    catalog: ModelCatalog, fields: dict[str, Any]
) -> None:
    settings = Settings(max_prompt_chars=10**6)
    body = chat(**fields)
    counted = await count_chat_prompt(body, catalog, settings)
    plan = await prepare_chat(body, RequestContext("r"), catalog, Settings(max_prompt_chars=10**6))
    (request,) = plan.requests
    assert counted == len(TOKENIZER.encode(request.prompt).ids)
    assert plan.prompt_tokens == (counted,)  # no max_tokens: planning counted it too


async def test_a_chat_over_the_context_is_still_counted(catalog: ModelCatalog) -> None:
    body = chat(messages=[{"role": "user", "content": "word " * 3000}])
    counted = await count_chat_prompt(body, catalog, Settings())
    assert counted > MAX_MODEL_LEN
    with pytest.raises(InvalidRequestError, match="maximum context length"):
        await prepare_chat(body, RequestContext("r"), catalog, Settings())


async def test_a_text_prompt_is_counted_as_sent(catalog: ModelCatalog) -> None:
    assert await count_prompt("m", "hello world", catalog, Settings()) == len(TOKENIZER.encode("hello world").ids)


async def test_refusals_are_the_chat_requests_own(catalog: ModelCatalog) -> None:
    with pytest.raises(ModelNotFoundError):
        await count_chat_prompt(chat(model="nope"), catalog, Settings())
    with pytest.raises(InvalidRequestError) as refused:
        await count_chat_prompt(
            chat(tools=[{"type": "function", "function": {"name": "bad name"}}]), catalog, Settings()
        )
    assert refused.value.param == "tools.0.function.name"
    with pytest.raises(InvalidRequestError) as too_long:
        await count_prompt("m", "x" * 50, catalog, Settings(max_prompt_chars=10))
    assert too_long.value.code == "prompt_too_long"
