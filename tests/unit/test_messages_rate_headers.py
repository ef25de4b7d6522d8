"""A limited key's answers on ``/v1/messages`` carry Anthropic's rate-limit headers
(``anthropic-ratelimit-*``, the reset as an RFC 3339 time, ``retry-after`` on a 429), and no
OpenAI ``x-ratelimit-*``; the OpenAI paths keep OpenAI's."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from gateway.anthropic.ratelimit import rate_headers, reset_time
from gateway.http.security import ApiKeyMiddleware
from gateway.keys.limits import UNCOUNTED, Admit, MemoryLimits
from gateway.keys.policy import KeyPolicy, KeyRing, hash_key

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_headers_name_each_limit_the_key_has_and_reset_at_an_rfc3339_time() -> None:
    policy = KeyPolicy("team", rpm=5, tpm=100)
    now = datetime.datetime(2026, 12, 2, 9, 30, 12, 250000, tzinfo=datetime.UTC).timestamp()
    headers = dict(rate_headers(policy, Admit(None, requests=2, tokens=130, reset=47.75), now=now))
    assert headers == {
        b"anthropic-ratelimit-requests-limit": b"5",
        b"anthropic-ratelimit-requests-remaining": b"3",
        b"anthropic-ratelimit-requests-reset": b"2026-12-02T09:31:00Z",
        b"anthropic-ratelimit-tokens-limit": b"100",
        b"anthropic-ratelimit-tokens-remaining": b"0",  # over the limit: never negative
        b"anthropic-ratelimit-tokens-reset": b"2026-12-02T09:31:00Z",
    }
    assert dict(rate_headers(KeyPolicy("c", max_concurrent=2), Admit(None, 1, 0, 3.0), now=now)) == {}
    assert rate_headers(policy, UNCOUNTED, now=now) == []  # the store was down, the gateway failed open


def test_the_reset_rounds_up_to_the_next_whole_second() -> None:
    assert reset_time(1_700_000_000.0) == "2023-11-14T22:13:20Z"
    assert reset_time(1_700_000_000.01) == "2023-11-14T22:13:21Z"


async def ok(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


def limited(tmp_path: Path) -> ApiKeyMiddleware:
    path = tmp_path / "keys.toml"
    path.write_text(f'[[key]]\nname = "team"\nsha256 = ["{hash_key("sk-a")}"]\nrpm = 2\ntpm = 1000\n')
    return ApiKeyMiddleware(ok, KeyRing((), path), limits=MemoryLimits())


async def post(app: Any, path: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        return await client.post(path, headers={"x-api-key": "sk-a"}, content=b"{}")


def reset_of(response: httpx.Response, name: str) -> datetime.datetime:
    value = response.headers[name]
    assert value.endswith("Z")
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_a_429_on_messages_carries_anthropics_headers_not_openais(tmp_path: Path) -> None:
    app = limited(tmp_path)
    before = datetime.datetime.now(datetime.UTC)
    first, second, refused = [await post(app, "/v1/messages") for _ in range(3)]
    assert first.status_code == second.status_code == 200
    assert first.headers["anthropic-ratelimit-requests-limit"] == "2"
    assert first.headers["anthropic-ratelimit-requests-remaining"] == "1"
    assert first.headers["anthropic-ratelimit-tokens-limit"] == "1000"
    assert refused.status_code == 429
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert refused.headers["anthropic-ratelimit-tokens-remaining"] == "1000"
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    reset = reset_of(refused, "anthropic-ratelimit-requests-reset")
    assert before < reset <= before + datetime.timedelta(seconds=61)
    assert reset_of(refused, "anthropic-ratelimit-tokens-reset") == reset
    for response in (first, second, refused):
        assert not [name for name in response.headers if name.startswith("x-ratelimit-")]


async def test_count_tokens_is_on_anthropics_headers_and_chat_keeps_openais(tmp_path: Path) -> None:
    app = limited(tmp_path)
    counted = await post(app, "/v1/messages/count_tokens")
    assert counted.headers["anthropic-ratelimit-requests-remaining"] == "1"
    assert "x-ratelimit-remaining-requests" not in counted.headers
    chat = await post(app, "/v1/chat/completions")
    assert chat.headers["x-ratelimit-remaining-requests"] == "0"
    assert not [name for name in chat.headers if name.startswith("anthropic-ratelimit-")]
