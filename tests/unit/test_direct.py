"""The generating routes called straight from the ASGI call (``http.direct``).

They must answer as the FastAPI routes they stand for. The refusals, the first invalid field,
the stdlib's JSON values, a body in pieces and a client leaving in every phase are tested through
the app in ``test_app`` and ``test_disconnect`` (every POST there goes through ``DirectRoutes``);
here: that each direct route is the declared route, with its handler and body model, and that
what is not exactly one of them still reaches FastAPI.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute

from gateway.app import create_app
from gateway.config import Settings
from gateway.http.direct import DIRECT_ROUTES
from gateway.http.routes import chat, completions, embeddings, messages, responses
from tests.fakes import ScriptedBackend, text_chunks
from tests.unit.test_app import call, make_repo

pytestmark = pytest.mark.anyio

JSON = "application/json"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_each_direct_route_is_the_declared_post_route_with_its_body_model(tmp_path: Path) -> None:
    routers = (chat.router, completions.router, responses.router, messages.router, embeddings.router)
    declared = {
        r.path: r for router in routers for r in router.routes if isinstance(r, APIRoute) and "POST" in r.methods
    }
    assert set(DIRECT_ROUTES) <= set(declared)
    app = create_app(Settings(model_repository=[make_repo(tmp_path)]), backend=ScriptedBackend())
    paths = app.openapi()["paths"]
    for path, route in DIRECT_ROUTES.items():
        assert declared[path].endpoint is route.endpoint
        schema = paths[path]["post"]["requestBody"]["content"][JSON]["schema"]
        assert schema["$ref"].rsplit("/", 1)[1] == route.model.__name__


async def test_other_methods_and_paths_are_fastapis_answers(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    response = await call(ScriptedBackend(), repo, "GET", "/v1/chat/completions")
    assert response.status_code == 405
    body = {"model": "m", "prompt": "hi", "max_tokens": 2}
    backend = ScriptedBackend(text_chunks(b"ok"))
    moved = await call(backend, repo, "POST", "/v1/completions/", json=body)
    assert moved.status_code == 307
    assert httpx.URL(moved.headers["location"]).path == "/v1/completions"
    assert backend.requests == []
