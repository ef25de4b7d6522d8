"""The HTTP edge of a real gateway process: API keys, CORS, limits, request ids, logs, metrics."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import MODEL, GatewayProcess, start_gateway, stop_gateway, wait_for

SCRIPTED = "scripted"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def locked(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A gateway with API keys (one from the env list, one from a file), CORS, small limits."""
    directory = tmp_path_factory.mktemp("locked")
    keys = directory / "keys.txt"
    keys.write_text("# team keys\nfile-key-1\n\nfile-key-2\n")
    gateway = start_gateway(
        triton.grpc_url,
        directory / "gateway.log",
        "--api-keys",
        "env-key",
        "--api-key-file",
        str(keys),
        "--metrics-require-auth",
        "--cors-origins",
        '["https://app.example"]',
        "--max-body-bytes",
        "4096",
        "--max-messages",
        "3",
        "--max-n",
        "2",
        "--max-tokens-limit",
        "8",
        "--max-prompt-chars",
        "500",
        "--log-requests",
        wait_ready=True,
    )
    yield gateway
    stop_gateway(gateway)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize("headers", [{}, auth("wrong"), {"Authorization": "Basic abc"}])
def test_missing_or_wrong_key_is_401_openai_shaped(locked: GatewayProcess, headers: dict[str, str]) -> None:
    response = httpx.post(locked.url + "/v1/chat/completions", json=CHAT, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("key", ["env-key", "file-key-1", "file-key-2"])
def test_configured_keys_are_accepted(locked: GatewayProcess, key: str) -> None:
    with openai.OpenAI(base_url=locked.url + "/v1", api_key=key, max_retries=0) as sdk:
        assert sdk.chat.completions.create(**CHAT).choices  # type: ignore[arg-type]


def test_api_key_header_is_accepted_and_checked(locked: GatewayProcess) -> None:
    """``x-api-key`` (Anthropic's SDKs) works on every route; errors on /v1/messages are Anthropic's."""
    hello = [{"role": "user", "content": "hi"}]
    with anthropic.Anthropic(base_url=locked.url, api_key="env-key", max_retries=0) as good:
        assert good.messages.create(model=MODEL, max_tokens=2, messages=hello).usage.output_tokens >= 1  # type: ignore[arg-type]
    with anthropic.Anthropic(base_url=locked.url, api_key="wrong", max_retries=0) as bad:
        with pytest.raises(anthropic.AuthenticationError) as info:
            bad.messages.create(model=MODEL, max_tokens=2, messages=hello)  # type: ignore[arg-type]
    assert info.value.body["type"] == "error"  # type: ignore[index]
    assert info.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    chat = locked.url + "/v1/chat/completions"
    assert httpx.post(chat, json=CHAT, headers={"x-api-key": "env-key"}).status_code == 200
    both = {"Authorization": "Bearer wrong", "x-api-key": "env-key"}  # Authorization wins
    assert httpx.post(chat, json=CHAT, headers=both).status_code == 401


def test_health_is_open_and_metrics_follow_the_setting(locked: GatewayProcess, gateway: GatewayProcess) -> None:
    assert httpx.get(locked.url + "/health").status_code == 200
    assert httpx.get(locked.url + "/health/ready").status_code == 200
    assert httpx.get(locked.url + "/metrics").status_code == 401
    assert httpx.get(locked.url + "/metrics", headers=auth("env-key")).status_code == 200
    assert httpx.get(gateway.url + "/metrics").status_code == 200  # default: open


def test_cors_preflight_allows_the_openai_js_sdk(locked: GatewayProcess) -> None:
    response = httpx.options(
        locked.url + "/v1/chat/completions",
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,x-stainless-os,x-stainless-retry-count",
        },
    )
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "https://app.example"
    allowed = response.headers["access-control-allow-headers"].lower()
    assert "x-stainless-os" in allowed and "authorization" in allowed
    denied = httpx.options(
        locked.url + "/v1/chat/completions",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in denied.headers


def test_cors_exposes_where_the_request_ran_to_browser_clients(locked: GatewayProcess) -> None:
    response = httpx.post(
        locked.url + "/v1/chat/completions",
        json=CHAT,
        headers={**auth("env-key"), "Origin": "https://app.example"},
    )
    assert response.status_code == 200, response.text
    exposed = {h.strip() for h in response.headers["access-control-expose-headers"].lower().split(",")}
    assert {"x-request-id", "x-gateway-replica", "x-gateway-route"} <= exposed
    assert response.headers["x-gateway-replica"] and response.headers["x-gateway-route"] == "least_loaded"


def test_cors_is_off_by_default(gateway: GatewayProcess) -> None:
    response = httpx.options(
        gateway.url + "/v1/chat/completions",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in response.headers


def test_body_over_limit_is_413(locked: GatewayProcess) -> None:
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
    response = httpx.post(locked.url + "/v1/chat/completions", json=big, headers=auth("env-key"))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


def test_chunked_body_over_limit_is_413(locked: GatewayProcess) -> None:
    def body():  # type: ignore[no-untyped-def]
        yield b'{"model": "tiny-llm", "messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}]}'

    response = httpx.post(
        locked.url + "/v1/chat/completions",
        content=body(),
        headers={**auth("env-key"), "content-type": "application/json"},
    )
    assert response.status_code == 413


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"messages": [{"role": "user", "content": "a"}] * 4}, "messages"),
        ({"n": 3}, "n"),
        ({"max_tokens": 9}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "p" * 600}]}, None),
    ],
)
def test_limits_are_clear_400s(locked: GatewayProcess, change: dict[str, object], param: str | None) -> None:
    response = httpx.post(locked.url + "/v1/chat/completions", json={**CHAT, **change}, headers=auth("env-key"))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_max_tokens_default_is_clamped_to_the_cap(locked: GatewayProcess) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
    reply = httpx.post(locked.url + "/v1/chat/completions", json=body, headers=auth("env-key"), timeout=30).json()
    assert reply["usage"]["completion_tokens"] == 8 and reply["choices"][0]["finish_reason"] == "length"


def test_request_id_reaches_triton_and_every_log_line_and_no_prompt_is_logged(locked: GatewayProcess) -> None:
    request_id = f"req-{uuid.uuid4().hex[:12]}"
    secret = f"secret-prompt-{uuid.uuid4().hex}"
    script = json.dumps({"echo_inputs": True, "responses": [{"utf8": [secret]}]})
    response = httpx.post(
        locked.url + "/v1/completions",
        json={"model": SCRIPTED, "prompt": script},
        headers={**auth("env-key"), "X-Request-Id": request_id},
        timeout=30,
    )
    assert response.headers["x-request-id"] == request_id
    assert response.status_code == 200, response.text
    echoed = json.loads(response.json()["choices"][0]["text"])
    assert echoed["request_id"] == request_id
    log = Path(locked.log).read_text()
    access = [
        json.loads(line.split("] ", 1)[1])
        for line in log.splitlines()
        if "gateway.access" in line and request_id in line
    ]
    assert access and access[-1]["status"] == 200 and access[-1]["model"] == SCRIPTED
    assert all(f"[{request_id}]" in line for line in log.splitlines() if request_id in line)
    assert secret not in log


def test_generated_request_id_when_none_or_invalid(gateway: GatewayProcess) -> None:
    plain = httpx.get(gateway.url + "/health")
    assert re.fullmatch(r"[0-9a-f]{32}", plain.headers["x-request-id"])
    hostile = httpx.get(gateway.url + "/health", headers={"X-Request-Id": "a b\tc" * 50})
    assert re.fullmatch(r"[0-9a-f]{32}", hostile.headers["x-request-id"])


def _samples(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_metrics_move_as_requests_pass(gateway: GatewayProcess, client: openai.OpenAI) -> None:
    before = httpx.get(gateway.url + "/metrics").text
    client.chat.completions.create(
        model=f"{MODEL}:alpha",
        messages=[{"role": "user", "content": "x"}],
        max_tokens=3,
        stream=True,
        extra_body={"ignore_eos": True},
    ).close()
    list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            max_tokens=3,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    # Inter-token gaps are observed between backend batches: tiny-llm's 3 tokens may arrive in one
    # batch on a busy machine, so a scripted stream with a pause makes sure one gap is measured.
    gap = json.dumps({"responses": [{"utf8": ["a"]}, {"utf8": ["b"], "delay": 0.2}]})
    with httpx.stream(
        "POST", gateway.url + "/v1/completions", json={"model": SCRIPTED, "prompt": gap, "stream": True}
    ) as r:
        assert r.status_code == 200 and r.read().endswith(b"data: [DONE]\n\n")
    after = httpx.get(gateway.url + "/metrics").text
    key = f'gateway_requests_total{{adapter="",endpoint="chat",model="{MODEL}",status="200",stream="true"}}'
    assert _samples(after, "gateway_requests_total")[key] == _samples(before, "gateway_requests_total").get(key, 0) + 1
    tokens = f'gateway_completion_tokens_total{{adapter="",model="{MODEL}"}}'
    assert (
        _samples(after, "gateway_completion_tokens_total")[tokens]
        >= _samples(before, "gateway_completion_tokens_total").get(tokens, 0) + 3
    )
    for name in (
        "gateway_time_to_first_token_seconds_count",
        "gateway_inter_token_latency_seconds_count",
        "gateway_request_duration_seconds_count",
        "gateway_request_prompt_tokens_count",
    ):
        assert sum(_samples(after, name).values()) > sum(_samples(before, name).values()), name
    assert f'vllm:num_requests_running{{model_name="{MODEL}"}}' in after
    assert f'vllm:num_requests_waiting{{model_name="{MODEL}"}}' in after
    assert "vllm:lora_requests_info{" in after and 'max_lora="2"' in after  # tiny-llm serves alpha and beta


def _lora_info(metrics: str, model: str) -> str:
    return next(
        line
        for line in metrics.splitlines()
        if line.startswith("vllm:lora_requests_info{") and f'model_name="{model}"' in line
    )


@pytest.mark.anyio
async def test_lora_info_shows_running_adapters(triton: TritonServer, tmp_path: Path) -> None:
    """The stream must provably still run while the metrics are read: a scripted model holds its
    second response back for a minute, and the gateway's model files give that model an adapter
    "beta" (the gateway lists adapters from ``multi_lora.json``; the scripted model ignores
    ``lora_name``). A gateway of its own, so no other test's request shows up in the label."""
    version = tmp_path / "repository" / SCRIPTED / "1"
    version.mkdir(parents=True)
    (version / "multi_lora.json").write_text(json.dumps({"beta": "unused"}))
    gateway = start_gateway(triton.grpc_url, tmp_path / "gateway.log", "--model-repository", str(version.parents[1]))
    script = json.dumps({"responses": [{"utf8": ["first "]}, {"utf8": ["never"], "delay": 60}]})
    body = {"model": f"{SCRIPTED}:beta", "prompt": script, "stream": True}
    try:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
            async with http.stream("POST", "/v1/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if '"first "' in line:
                        break
                running = _lora_info((await http.get("/metrics")).text, SCRIPTED)
                assert 'running_lora_adapters="beta"' in running and 'max_lora="1"' in running, running
            # the client left: the gateway cancels the generation and gives the slot back
            assert wait_for(
                lambda: 'running_lora_adapters=""' in _lora_info(httpx.get(gateway.url + "/metrics").text, SCRIPTED)
            )
    finally:
        stop_gateway(gateway)


@pytest.mark.parametrize("path", ["/health", "/health/ready", "/v1/models", f"/v1/models/{MODEL}", "/metrics"])
def test_head_works_wherever_get_does(gateway: GatewayProcess, path: str) -> None:
    head = httpx.head(gateway.url + path)
    get = httpx.get(gateway.url + path)
    assert head.status_code == get.status_code == 200
    assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"]
    if path != "/metrics":  # the metrics page changes between the two requests
        assert head.headers["content-length"] == get.headers["content-length"]


def test_head_is_refused_where_get_is(locked: GatewayProcess, gateway: GatewayProcess) -> None:
    assert httpx.head(locked.url + "/v1/models").status_code == httpx.get(locked.url + "/v1/models").status_code == 401
    assert httpx.head(gateway.url + "/v1/chat/completions").status_code == 405
    assert httpx.head(gateway.url + "/v1/nope").status_code == 404


@pytest.mark.parametrize(
    "headers", [{}, {"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}]
)
def test_a_body_not_sent_as_json_gets_a_400_that_says_so(gateway: GatewayProcess, headers: dict[str, str]) -> None:
    # curl -d without -H 'Content-Type: application/json' sends the form type
    response = httpx.post(gateway.url + "/v1/chat/completions", content=json.dumps(CHAT).encode(), headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unsupported_media_type" and error["type"] == "invalid_request_error"
    assert "must be JSON, sent with 'Content-Type: application/json'" in error["message"]


def test_requests_refused_before_admission_are_counted(gateway: GatewayProcess, client: openai.OpenAI) -> None:
    def refused(endpoint: str, status: str) -> float:
        key = f'gateway_requests_total{{adapter="",endpoint="{endpoint}",model="",status="{status}",stream=""}}'
        return _samples(httpx.get(gateway.url + "/metrics").text, "gateway_requests_total").get(key, 0.0)

    before = (refused("chat", "400"), refused("chat", "404"), refused("completions", "400"))
    url = gateway.url + "/v1/chat/completions"
    assert httpx.post(url, content=b"{oops", headers={"content-type": "application/json"}).status_code == 400
    assert httpx.post(url, content=json.dumps(CHAT).encode(), headers={"content-type": "text/plain"}).status_code == 400
    assert httpx.post(url, json={**CHAT, "temperature": 7}).status_code == 400
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="")
    after = (refused("chat", "400"), refused("chat", "404"), refused("completions", "400"))
    assert after == (before[0] + 3, before[1] + 1, before[2] + 1)
