"""The request-body limit and the image cap agree: unset, ``max_body_bytes`` leaves room for the
largest image allowed sent as a base64 data URL (4/3 of its bytes), so ``image_max_bytes`` is
reachable; a body over the limit is a 413 in the API's own error shape."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from gateway.app import create_app
from gateway.config import MIB, Settings, body_bytes_for_image
from tests.fakes import ScriptedBackend, text_chunks
from tests.unit.test_app import make_repo

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def post(settings: Settings, path: str, content: bytes) -> httpx.Response:
    app = create_app(settings, backend=ScriptedBackend(text_chunks(b"a")))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(path, content=content, headers={"content-type": "application/json"})


def chat_with_image(size: int) -> bytes:
    """A chat request whose one image part is a data URL of ``size`` bytes."""
    url = "data:image/png;base64," + base64.b64encode(b"\0" * size).decode()
    text = "x" * 100_000  # some conversation beside the image
    return (
        b'{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": ['
        + b'{"type": "text", "text": "'
        + text.encode()
        + b'"}, '
        + b'{"type": "image_url", "image_url": {"url": "'
        + url.encode()
        + b'"}}]}]}'
    )


async def test_the_default_body_limit_takes_an_image_of_the_default_cap_as_a_data_url(tmp_path: Path) -> None:
    settings = Settings(model_repository=[make_repo(tmp_path)])
    body = chat_with_image(settings.image_max_bytes)
    assert len(body) > 8 * MIB  # over the old fixed limit
    reply = await post(settings, "/v1/chat/completions", body)
    assert reply.status_code == 400, reply.text  # read and planned: this model takes no images
    assert reply.json()["error"]["param"] == "messages.0.content.1"


@pytest.mark.parametrize("image_max_bytes", [1, 3 * MIB, 6 * MIB + 1, 10 * MIB, 30 * MIB + 7])
def test_the_derived_limit_covers_the_image_cap_and_never_drops_under_8_mib(image_max_bytes: int) -> None:
    limit = Settings(image_max_bytes=image_max_bytes).max_body_bytes
    assert limit == body_bytes_for_image(image_max_bytes)
    assert limit >= max(8 * MIB, len(base64.b64encode(b"\0" * image_max_bytes)) + MIB)
    assert limit % MIB == 0


def test_a_limit_that_is_set_is_the_limit() -> None:
    assert Settings(max_body_bytes=2048).max_body_bytes == 2048
    assert Settings(max_body_bytes=0).max_body_bytes == 15 * MIB  # 0: follows the default 10 MiB cap
    with pytest.raises(ValueError, match="max_body_bytes"):
        Settings(max_body_bytes=5)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_a_body_over_the_limit_is_a_413_in_the_apis_shape(tmp_path: Path, path: str) -> None:
    settings = Settings(model_repository=[make_repo(tmp_path)], image_max_bytes=1000)
    reply = await post(settings, path, chat_with_image(9 * MIB))
    assert reply.status_code == 413
    answer = reply.json()
    if path == "/v1/messages":
        assert answer["type"] == "error" and answer["error"]["type"] == "request_too_large"
    else:
        assert set(answer["error"]) == {"message", "type", "param", "code"}
        assert answer["error"]["code"] == "request_too_large"
    assert f"{8 * MIB} bytes" in answer["error"]["message"]
