"""``/v1/messages`` with values chat's request model bounds and Anthropic's does not: a 400 in
Anthropic's shape whose message names the Messages field the client sent (``stop_sequences``,
``tools.N.name``), never chat's name for it and never a 500."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes import ScriptedBackend, text_chunks
from tests.unit.test_app import call, make_repo

pytestmark = pytest.mark.anyio

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def refusal(tmp_path: Path, path: str, body: dict[str, Any]) -> str:
    reply = await call(ScriptedBackend(text_chunks(b"a")), make_repo(tmp_path), "POST", path, json=body)
    assert reply.status_code == 400, reply.text
    answer = reply.json()
    assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
    return str(answer["error"]["message"])


async def test_more_than_16_stop_sequences_is_a_400_naming_stop_sequences(tmp_path: Path) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": HI, "stop_sequences": [f"s{i}" for i in range(17)]}
    message = await refusal(tmp_path, "/v1/messages", body)
    assert "'stop_sequences'" in message and "16 stop sequences" in message


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
async def test_a_tool_name_that_is_not_a_string_names_the_tool(tmp_path: Path, path: str) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": HI, "tools": [{"name": 5, "input_schema": {}}]}
    message = await refusal(tmp_path, path, body)
    assert "tools.0.name" in message


async def test_a_tool_use_id_that_is_not_a_string_names_the_block(tmp_path: Path) -> None:
    turns = [*HI, {"role": "assistant", "content": [{"type": "tool_use", "id": 7, "name": "f", "input": {}}]}]
    message = await refusal(tmp_path, "/v1/messages", {"model": "m", "max_tokens": 5, "messages": turns})
    assert "messages.1.content.0.id" in message
