"""The unit fuzz's cases (tests/unit/test_fuzz.py, test_fuzz_bodies.py), fewer of them, over real
HTTP against gateways in front of the session's real Triton: the open gateway and one with keys
(a flat key, policy keys, image URLs allowed for 127.0.0.1 and ``*.example``). Some streams are
left by the client after their first event. Whatever arrives: no 5xx, every error shaped, every
stream read to its end complete; and once the run settles, no work left in Triton (the reference
model's own in-flight gauge, Triton's pending count for every model) nor in the gateways.

Generation is kept short (every token cap at most ``MAX_TOKENS``, a body without one given one,
``n`` at most ``MAX_CHOICES``): what is fuzzed is what the
request says, not how long the random model talks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import MODEL, GatewayProcess, read_metric, start_gateway, stop_gateway, wait_for
from tests.unit.test_fuzz import (
    FLAT_KEY,
    GENERATING,
    KEY_HEADERS,
    OPERATIONS,
    assert_complete_stream,
    assert_openai_shaped,
    fuzz_settings,
    key_file_text,
    record_answer,
)
from tests.unit.test_fuzz import MODEL as UNIT_MODEL
from tests.unit.test_fuzz_bodies import anthropic_bodies, chat_bodies, embedding_bodies, responses_bodies

EMBED = "tiny-llm-embed"
MAX_TOKENS = 8
TOKEN_CAPS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "min_tokens")
DEFAULT_CAPS = {
    "/v1/chat/completions": "max_tokens",
    "/v1/completions": "max_tokens",
    "/v1/responses": "max_output_tokens",
}
"""The cap a generating body without one gets."""
MAX_CHOICES = 4


@pytest.fixture(scope="module")
def keyed(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    folder = tmp_path_factory.mktemp("fuzz-keyed")
    policy = folder / "keys.toml"
    policy.write_text(key_file_text().replace(f'"{UNIT_MODEL}"', f'"{MODEL}"').replace('"e"', f'"{EMBED}"'))
    gateway = start_gateway(
        triton.grpc_url,
        folder / "gateway.log",
        "--api-keys",
        FLAT_KEY,
        "--api-key-policy-file",
        str(policy),
        "--image-fetch-hosts",
        "127.0.0.1,*.example",
        "--image-fetch-timeout",
        "2",
    )
    yield gateway
    stop_gateway(gateway)


def targets(open_gateway: GatewayProcess, keyed: GatewayProcess) -> list[tuple[str, str, dict[str, str]]]:
    """(name, base URL, headers): the open gateway and the team key most, every key once."""
    team = {"Authorization": "Bearer sk-team"}
    keyed_targets = [(name, keyed.url, headers) for name, headers in KEY_HEADERS]
    return [("open", open_gateway.url, {}), ("team", keyed.url, team)] * 2 + keyed_targets


def real_models(path: str, body: Any) -> Any:
    """The unit cases' model names as this Triton serves them, and every token cap kept short."""
    if not isinstance(body, dict):
        return body
    if body.get("model") == UNIT_MODEL:
        body["model"] = EMBED if path == "/v1/embeddings" else MODEL
    elif body.get("model") == f"{UNIT_MODEL}:x":
        body["model"] = f"{MODEL}:alpha"
    elif body.get("model") == "e":
        body["model"] = EMBED
    for cap in TOKEN_CAPS:
        if isinstance(body.get(cap), int) and body[cap] > MAX_TOKENS:
            body[cap] = MAX_TOKENS
    default_cap = DEFAULT_CAPS.get(path)
    if default_cap is not None and not any(cap in body for cap in TOKEN_CAPS):
        body[default_cap] = MAX_TOKENS  # no cap at all: the context's room, minutes of tiny-llm at n = 128
    if isinstance(body.get("n"), int) and body["n"] > MAX_CHOICES:
        body["n"] = MAX_CHOICES
    return body


def send(method: str, url: str, path: str, headers: dict[str, str], body: Any, leave: bool, **kwargs: Any) -> None:
    """One case over HTTP; a stream is read to its end (and checked), or left after its first
    line when ``leave``: the gateway must cancel its work in Triton."""
    content = json.dumps(body).encode() if body is not None else None
    if content is not None:
        headers = {**headers, "content-type": "application/json"}
    with httpx.stream(method, url + path, headers=headers, content=content, timeout=60, **kwargs) as response:
        streaming = response.headers.get("content-type", "").startswith("text/event-stream")
        if streaming and response.status_code == 200 and leave:
            next(response.iter_lines())
            record_answer(path, 200, "")
            return
        response.read()
    record_answer(path, response.status_code, response.text)
    assert_openai_shaped(response.status_code, response.content, path)
    if streaming and response.status_code == 200:
        assert_complete_stream(path, response.text)


def gateway_metric(gateway: GatewayProcess, name: str) -> float:
    """A gateway's metric, summed over its labels; its page needs the flat key on the keyed one
    (the open one ignores it). A gauge no request set yet reads 0."""
    page = httpx.get(gateway.url + "/metrics", headers={"Authorization": f"Bearer {FLAT_KEY}"}, timeout=5)
    assert page.status_code == 200, page.text
    total = 0.0
    for line in page.text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def work_left(triton: TritonServer, *gateways: GatewayProcess) -> dict[str, float]:
    left = {
        "tiny_llm_requests_in_flight": read_metric(triton.metrics_url, "tiny_llm_requests_in_flight"),
        "nv_inference_pending_request_count": read_metric(triton.metrics_url, "nv_inference_pending_request_count"),
    }
    for index, gateway in enumerate(gateways):
        for name in ("gateway_requests_running", "gateway_requests_waiting"):
            left[f"{name}[{index}]"] = gateway_metric(gateway, name)
    return left


def assert_nothing_left(triton: TritonServer, *gateways: GatewayProcess) -> None:
    """Once every answer is in: no request generating or queued in the reference model or in
    Triton (any model), none holding or awaiting a slot in a gateway."""
    assert wait_for(lambda: not any(work_left(triton, *gateways).values()), timeout=20), work_left(triton, *gateways)


FUZZED = sorted(OPERATIONS)


def test_openapi_cases_and_odd_bodies_over_real_triton_leave_nothing_running(
    gateway: GatewayProcess, keyed: GatewayProcess, triton: TritonServer
) -> None:
    every = targets(gateway, keyed)

    for label in FUZZED:
        operation = OPERATIONS[label]

        @fuzz_settings(12 if label in GENERATING else 6)
        @given(case=operation.as_strategy(), target=st.sampled_from(every), leave=st.booleans())
        def run_case(case: Any, target: tuple[str, str, dict[str, str]], leave: bool) -> None:
            name, url, headers = target
            if isinstance(case.body, dict) and "model" in case.body:
                case.body["model"] = UNIT_MODEL
            if case.path_parameters and "model_id" in case.path_parameters:
                case.path_parameters["model_id"] = MODEL
            kwargs = case.as_transport_kwargs()
            kwargs.pop("cookies", None)
            method, path = kwargs.pop("method"), kwargs.pop("url")
            body = real_models(case.path, kwargs.pop("json", None))
            send(method, url, path, {**kwargs.pop("headers", {}), **headers}, body, leave, params=kwargs.get("params"))

        run_case()

    bodies = [
        ("/v1/chat/completions", chat_bodies()),
        ("/v1/responses", responses_bodies()),
        ("/v1/messages", anthropic_bodies()),
        ("/v1/embeddings", embedding_bodies()),
    ]
    for path, strategy in bodies:

        @fuzz_settings(40)
        @given(body=strategy, path=st.just(path), keyed_target=st.booleans(), leave=st.booleans())
        def run_body(body: dict[str, Any], path: str, keyed_target: bool, leave: bool) -> None:
            url, headers = (keyed.url, {"Authorization": "Bearer sk-team"}) if keyed_target else (gateway.url, {})
            send("POST", url, path, headers, real_models(path, body), leave)

        run_body()

    assert_nothing_left(triton, gateway, keyed)
    for process in (gateway, keyed):
        assert "Traceback" not in process.log_text(), process.log_text()[-5000:]


def test_the_settled_check_sees_work_in_triton(gateway: GatewayProcess, triton: TritonServer) -> None:
    """``assert_nothing_left`` is not vacuous: a stream in progress shows in the gauges it reads."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1500, "stream": True}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json={**body, "ignore_eos": True}, timeout=30) as r:
        lines = r.iter_lines()
        for _ in range(3):
            next(lines)
        assert read_metric(triton.metrics_url, "tiny_llm_requests_in_flight") >= 1
        assert gateway_metric(gateway, "gateway_requests_running") >= 1
    assert_nothing_left(triton, gateway)
