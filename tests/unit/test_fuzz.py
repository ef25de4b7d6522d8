"""Bad input, systematically: schemathesis over the gateway's own OpenAPI document for /v1/*,
/tokenize and /detokenize, and hypothesis over raw request bodies. Whatever arrives: no 5xx, no
hang, every error OpenAI-shaped (Anthropic-shaped on Anthropic's ``/v1/messages`` paths).

Runs in-process against an in-memory backend so that thousands of cases stay fast; the real
Triton path is covered by tests/integration.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import Settings
from tests.fakes import ScriptedBackend, text_chunks
from tests.unit.test_app import make_repo

ERROR_KEYS = {"message", "type", "param", "code"}


def _app(tmp: Path):  # type: ignore[no-untyped-def]
    repo = make_repo(tmp, adapters=("x",))
    backend = ScriptedBackend(text_chunks(b"he", b"llo", reason="length"))
    return create_app(Settings(model_repository=[repo], first_response_wait=0.5, max_n=4), backend=backend)


def _build() -> Any:
    import tempfile

    return _app(Path(tempfile.mkdtemp(prefix="fuzz-repo-")))


app = _build()
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
client = TestClient(app, raise_server_exceptions=False)
# CI runs a fast subset; FUZZ_SCALE=10 (or more) for a deeper run.
SCALE = float(os.environ.get("FUZZ_SCALE", "1"))


def examples(n: int) -> int:
    return max(1, int(n * SCALE))


def assert_openai_shaped(status: int, body: bytes, path: str = "") -> None:
    assert status < 500, body[:500]
    if status >= 400 and (path == "/v1/messages" or path.startswith("/v1/messages/")):
        payload = json.loads(body)
        assert payload["type"] == "error" and set(payload["error"]) == {"type", "message"}, payload
        assert isinstance(payload["error"]["message"], str) and payload["error"]["message"]
    elif status >= 400:
        error = json.loads(body)["error"]
        assert set(error) == ERROR_KEYS, error
        assert isinstance(error["message"], str) and error["message"]


@schema.include(path_regex="^/(v1/|tokenize|detokenize)").parametrize()
@settings(max_examples=examples(30), deadline=None, suppress_health_check=list(HealthCheck))
def test_openapi_cases_never_5xx_and_errors_are_openai_shaped(case: Any) -> None:
    if isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = "m"  # a served model, so cases reach translation and the backend
    response = case.call()
    assert_openai_shaped(response.status_code, response.content, case.path)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
FIELDS = [
    "model",
    "messages",
    "prompt",
    "temperature",
    "top_p",
    "n",
    "stream",
    "stream_options",
    "stop",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "seed",
    "response_format",
    "structured_outputs",
    "tools",
    "top_k",
    "min_p",
    "repetition_penalty",
    "min_tokens",
    "ignore_eos",
    "stop_token_ids",
    "include_stop_str_in_output",
    "chat_template_kwargs",
    "echo",
    "suffix",
]


@st.composite
def mutated_requests(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    path = draw(st.sampled_from(["/v1/chat/completions", "/v1/completions"]))
    body: dict[str, Any] = {"model": "m", "max_tokens": 2}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    for field in draw(st.lists(st.sampled_from(FIELDS), max_size=3, unique=True)):
        body[field] = draw(json_values)
    return path, body


@settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck))
@given(request=mutated_requests())
def test_mutated_requests_never_5xx(request: tuple[str, dict[str, Any]]) -> None:
    path, body = request
    response = client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert_openai_shaped(response.status_code, response.content)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    raw=st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()),
    content_type=st.sampled_from(["application/json", "text/plain", ""]),
)
def test_arbitrary_bodies_never_5xx(raw: bytes, content_type: str) -> None:
    response = client.post(
        "/v1/chat/completions", content=raw, headers={"content-type": content_type} if content_type else {}
    )
    assert_openai_shaped(response.status_code, response.content)


def test_integers_json_cannot_hold_in_64_bits_echoed_back_are_not_a_500() -> None:
    """Found by the OpenAPI fuzzing above: the Responses object echoes ``text.format`` (and
    ``tools``, ``metadata``), where a client may put an integer beyond 64 bits (a JSON schema's
    ``maximum``); orjson refuses those, so the answer must be encoded another way, not fail."""
    huge = -9223372036854775809
    body = {"model": "m", "input": "", "text": {"format": {"": huge, "type": "text"}}}
    for stream in (False, True):
        response = client.post("/v1/responses", json={**body, "stream": stream})
        assert response.status_code == 200, response.text
        assert str(huge) in response.text
