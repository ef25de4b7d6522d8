"""With API keys on, what a client learns without a key, over real HTTP against the gateway and
the session's real Triton: every route the app declares (every method, and the methods it does
not declare) and paths it does not serve answer 401 in OpenAI's shape (Anthropic's on
``/v1/messages``), the probes answer without naming a model, and no answer names a model, an
adapter or a key. Then what a key limited to some models learns of the others: nothing, word for
word as for a model nothing serves. Prometheus scrapes ``/metrics`` on its own port without a key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from fastapi.routing import iter_route_contexts

from gateway.app import create_app
from gateway.config import Settings
from gateway.keys.policy import hash_key
from gateway.triton_launcher import TritonServer, free_port
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway

FULL_KEY, LIMITED_KEY, FLAT_KEY = "sk-quokka-full", "sk-quokka-limited", "sk-flat-wombat"
KEY_NAMES = ("tenant-quokka-full", "tenant-quokka-limited")
LIMITED_MODELS = ("prefix_cache", "scripted")
"""Not ``tiny-llm``, whose adapters the limited key must not learn."""
PROBES = ("/health", "/health/live", "/health/ready")
UNKNOWN_PATHS = ("/", "/nothing", "/v1", "/v1/", "/v1/nothing/here", "/health/ready/x", "/tokenize/x", "/.env")
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@pytest.fixture(scope="module")
def keyed(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, int]]:
    keys = tmp_path_factory.mktemp("unauthenticated") / "keys.toml"
    keys.write_text(
        f'[[key]]\nname = "{KEY_NAMES[0]}"\nsha256 = "{hash_key(FULL_KEY)}"\n\n'
        f'[[key]]\nname = "{KEY_NAMES[1]}"\nsha256 = "{hash_key(LIMITED_KEY)}"\nmodels = {json.dumps(LIMITED_MODELS)}\n'
    )
    metrics_port = free_port()
    gateway = start_gateway(
        triton.grpc_url,
        keys.parent / "gateway.log",
        "--api-keys",
        FLAT_KEY,
        "--api-key-policy-file",
        str(keys),
        "--metrics-port",
        str(metrics_port),
    )
    yield gateway, metrics_port
    stop_gateway(gateway)


def served_ids(gateway: GatewayProcess) -> list[str]:
    """Every model and adapter id (``base:adapter``) the gateway serves, as a full key sees them."""
    answer = httpx.get(gateway.url + "/v1/models", headers={"Authorization": f"Bearer {FULL_KEY}"}, timeout=30)
    assert answer.status_code == 200
    return [model["id"] for model in answer.json()["data"]]


def secrets_of(gateway: GatewayProcess) -> set[str]:
    """What no answer to a client without a key may contain: model, adapter and key names, keys."""
    ids = served_ids(gateway)
    adapters = {model_id.rpartition(":")[2] for model_id in ids if ":" in model_id}
    assert adapters >= {"alpha", "beta"} and "tiny-llm" in ids, ids
    return {*ids, *adapters, *KEY_NAMES, FULL_KEY, LIMITED_KEY, FLAT_KEY}


def declared_routes() -> list[tuple[str, set[str]]]:
    """(path with its parameters filled, methods) of every route the app declares."""
    app = create_app(Settings(responses_store_enabled=False, api_keys="k"))
    routes = []
    for context in iter_route_contexts(app.routes):
        path = context.path
        assert path is not None
        methods = set(getattr(context.original_route, "methods", None) or {"GET"})
        filled = path.replace("{model_id:path}", "tiny-llm:alpha").replace("{response_id}", "resp_1")
        filled = filled.replace("{file_id}", "file-1").replace("{batch_id}", "batch_1")
        assert "{" not in filled, f"a parameter this walk does not fill: {path}"
        routes.append((filled, methods))
    assert {path for path, _ in routes} >= {"/v1/chat/completions", "/v1/messages", "/metrics", "/docs", *PROBES}
    return routes


def leaks(response: httpx.Response, secrets: set[str]) -> list[str]:
    text = (response.content + repr(response.headers.multi_items()).encode()).decode("utf-8", "replace")
    return [secret for secret in secrets if secret in text]


def assert_refused(response: httpx.Response, path: str) -> None:
    assert response.status_code == 401, (response.request.method, path, response.status_code, response.text)
    assert response.headers["www-authenticate"] == "Bearer"
    if response.request.method == "HEAD":
        assert response.content == b""
        return
    body = response.json()
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
        assert body["error"]["type"] == "authentication_error"
    else:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
        assert (body["error"]["type"], body["error"]["code"]) == ("authentication_error", "invalid_api_key")


def test_without_a_key_every_route_and_unknown_path_is_a_401_that_names_nothing(
    keyed: tuple[GatewayProcess, int],
) -> None:
    gateway, _ = keyed
    secrets = secrets_of(gateway)
    walked: list[tuple[str, str]] = []
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        for path, declared in [*declared_routes(), *((path, set()) for path in UNKNOWN_PATHS)]:
            if path in PROBES:
                continue
            for method in sorted(declared | set(METHODS)):
                for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"x-api-key": "sk-wrong"}):
                    response = http.request(method, path, headers=headers, json={"model": "tiny-llm:alpha"})
                    assert_refused(response, path)
                    assert not leaks(response, secrets), (method, path, leaks(response, secrets))
                walked.append((method, path))
    assert ("POST", "/v1/messages") in walked and ("GET", "/openapi.json") in walked


def test_the_probes_answer_without_a_key_and_name_no_model(keyed: tuple[GatewayProcess, int]) -> None:
    gateway, _ = keyed
    secrets = secrets_of(gateway)
    for path in PROBES:
        for method in ("GET", "HEAD"):
            response = httpx.request(method, gateway.url + path, headers={"Authorization": "Bearer sk-wrong"})
            assert response.status_code == 200, (method, path)
            assert not leaks(response, secrets), (method, path, leaks(response, secrets))
    assert httpx.get(gateway.url + "/health/ready").json() == {"status": "ready"}
    with_key = httpx.get(gateway.url + "/health/ready", headers={"Authorization": f"Bearer {LIMITED_KEY}"})
    assert with_key.json() == {"status": "ready", "models": sorted(LIMITED_MODELS)}, "a key's models, no more"


def test_prometheus_scrapes_the_metrics_port_without_a_key(keyed: tuple[GatewayProcess, int]) -> None:
    gateway, metrics_port = keyed
    scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
    assert scraped.status_code == 200 and "# TYPE gateway_requests_total counter" in scraped.text
    assert httpx.get(f"http://127.0.0.1:{metrics_port}/v1/models", timeout=10).status_code == 404
    own_port = httpx.get(gateway.url + "/metrics", headers={"Authorization": f"Bearer {FULL_KEY}"}, timeout=10)
    assert own_port.status_code == 404, "the clients' port serves no metrics at all"


def chat(gateway: GatewayProcess, model: str, key: str = LIMITED_KEY) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


@pytest.mark.parametrize("hidden", ["tiny-llm:x", "tiny-llm:alpha", "tiny-llm", "firehose", "alpha"])
def test_a_model_or_adapter_outside_the_keys_list_is_answered_as_one_nothing_serves(
    keyed: tuple[GatewayProcess, int], hidden: str
) -> None:
    """Byte for byte the 404 of an id nothing serves (the id itself aside): ``tiny-llm:x`` does
    not confirm ``tiny-llm`` nor list its adapters, as it did before the key's list was asked."""
    gateway, _ = keyed
    assert hidden in served_ids(gateway) or hidden.partition(":")[0] in served_ids(gateway) or hidden == "alpha"
    ghost = "ghost-model:x" if ":" in hidden else "ghost-model"
    refused, unknown = chat(gateway, hidden), chat(gateway, ghost)
    assert refused.status_code == unknown.status_code == 404
    assert refused.content.replace(hidden.encode(), b"ID") == unknown.content.replace(ghost.encode(), b"ID")
    assert b"Adapters" not in refused.content


def test_an_unknown_adapter_of_a_model_the_key_may_use_names_its_adapters(keyed: tuple[GatewayProcess, int]) -> None:
    gateway, _ = keyed
    answer = chat(gateway, "tiny-llm:nope", FULL_KEY)
    assert answer.status_code == 404
    assert "has no LoRA adapter 'nope'. Adapters: alpha, beta" in answer.json()["error"]["message"]


def test_tokenize_without_a_model_names_only_the_keys_models(keyed: tuple[GatewayProcess, int]) -> None:
    gateway, _ = keyed
    assert len(served_ids(gateway)) > len(LIMITED_MODELS) + 2, "the gateway serves models the key may not use"
    answer = httpx.post(
        gateway.url + "/tokenize", json={"prompt": "hi"}, headers={"Authorization": f"Bearer {LIMITED_KEY}"}
    )
    assert answer.status_code == 400
    expected = f"'model' is required: this gateway serves 2 models ({', '.join(LIMITED_MODELS)})."
    assert answer.json()["error"]["message"] == expected
