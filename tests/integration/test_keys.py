"""Keys with policies, over real HTTP against the gateway and the session's real Triton: a key's
requests per minute, tokens per minute and requests in flight hold to within one request, every
answer carries OpenAI's rate-limit headers, a model outside a key's list does not exist for it,
the key file reloads under load without a failed request, and the Responses store follows the
key's name. Then the same limits across ``--workers 2``, and across two gateways sharing a real
Redis, with Redis killed mid-run under both failure modes.

Windows are wall-clock minutes: a test that counts requests starts in a fresh window
(``fresh_window``) so that the minute cannot turn while it counts."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gateway.keys.policy import hash_key
from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway, wait_for
from tests.redis_server import RedisServer

SCRIPTED = "scripted"
KEYS = {
    "sk-rpm": ("rpm-team", 'models = ["scripted"]\nrpm = 5'),
    "sk-tpm": ("tpm-team", 'models = ["scripted"]\ntpm = 40'),
    "sk-stream": ("stream-team", "tpm = 40"),
    "sk-only": ("only-team", 'models = ["scripted"]\nrpm = 10000'),
    "sk-conc": ("conc-team", "max_concurrent = 2"),
    "sk-free": ("free-team", ""),
}
RATE_HEADERS = ("limit", "remaining", "reset")


def script(responses: int = 3, delay: float = 0.0) -> str:
    return json.dumps({"responses": [{"utf8": ["tok "], "delay": delay} for _ in range(responses)]})


def key_file(keys: dict[str, tuple[str, str]], extra_hashes: dict[str, list[str]] | None = None) -> str:
    out = []
    for key, (name, limits) in keys.items():
        hashes = [hash_key(key), *(extra_hashes or {}).get(name, [])]
        out.append(f'[[key]]\nname = "{name}"\nsha256 = {json.dumps(hashes)}\n{limits}\n')
    return "\n".join(out)


def fresh_window(needed: float = 8.0) -> None:
    """Wait for the next minute if fewer than ``needed`` seconds are left of this one."""
    left = 60 - time.time() % 60
    if left < needed:
        time.sleep(left + 0.05)


def post(gateway: GatewayProcess, key: str, body: dict[str, object], path: str = "/v1/completions") -> httpx.Response:
    """One request on its own connection (with several workers, the kernel spreads them)."""
    return httpx.post(gateway.url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def complete(gateway: GatewayProcess, key: str, responses: int = 3) -> httpx.Response:
    return post(gateway, key, {"model": SCRIPTED, "prompt": script(responses)})


@pytest.fixture(scope="module")
def key_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys.toml"
    path.write_text(key_file(KEYS, {"free-team": [hash_key("sk-free-rotated")]}))
    return path


@pytest.fixture(scope="module")
def keyed(triton: TritonServer, key_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gateway = start_gateway(
        triton.grpc_url,
        tmp_path_factory.mktemp("keyed") / "gateway.log",
        "--api-keys",
        "sk-flat",
        "--api-key-policy-file",
        str(key_path),
        "--api-key-reload-interval",
        "0.2",
        "--log-requests",
        "--responses-store",
        f"sqlite:///{tmp_path_factory.mktemp('store') / 'responses.db'}",
    )
    yield gateway
    stop_gateway(gateway)


def test_rpm_holds_and_every_answer_says_how_much_is_left(keyed: GatewayProcess) -> None:
    fresh_window()
    answers = [complete(keyed, "sk-rpm") for _ in range(7)]
    assert [a.status_code for a in answers] == [200] * 5 + [429] * 2
    assert [a.headers["x-ratelimit-remaining-requests"] for a in answers] == ["4", "3", "2", "1", "0", "0", "0"]
    for answer in answers:
        assert answer.headers["x-ratelimit-limit-requests"] == "5"
        assert answer.headers["x-ratelimit-reset-requests"].endswith("s")
        assert "x-ratelimit-limit-tokens" not in answer.headers  # the key has no token limit
    refused = answers[-1]
    error = refused.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("rate_limit_error", "rate_limit_exceeded", None)
    assert "rpm-team" in error["message"] and "sk-rpm" not in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    # The flat key is not limited, and neither is listing models.
    assert all(complete(keyed, "sk-flat").status_code == 200 for _ in range(6))
    models = httpx.get(keyed.url + "/v1/models", headers={"Authorization": "Bearer sk-rpm"}, timeout=10)
    assert models.status_code == 200
    # The usage by key name, and the refusals, on /metrics; the name in the request log.
    page = httpx.get(keyed.url + "/metrics", headers={"Authorization": "Bearer sk-flat"}, timeout=10).text
    assert 'gateway_key_requests_total{key="rpm-team",model="scripted",status="200"} 5.0' in page
    assert 'gateway_key_completion_tokens_total{key="rpm-team",model="scripted"} 15.0' in page
    assert 'gateway_key_rate_limited_total{key="rpm-team",limit="requests"} 2.0' in page
    assert "sk-rpm" not in page
    assert '"key":"rpm-team"' in keyed.log_text() and "sk-rpm" not in keyed.log_text()


def test_a_stream_carries_the_headers_and_is_not_cut_off_past_the_token_budget(keyed: GatewayProcess) -> None:
    fresh_window()
    body = {"model": SCRIPTED, "prompt": script(60), "stream": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": "Bearer sk-stream"}
    with httpx.stream("POST", keyed.url + "/v1/completions", json=body, headers=headers, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["x-ratelimit-limit-tokens"] == "40"
        assert response.headers["x-ratelimit-remaining-tokens"] == "40"
        lines = [line for line in response.iter_lines() if line.startswith("data: {")]
    usage = json.loads(lines[-1][6:])["usage"]
    assert usage["completion_tokens"] == 60  # ran past the budget of 40 to its end
    refused = complete(keyed, "sk-stream")
    assert refused.status_code == 429
    assert "tokens per minute" in refused.json()["error"]["message"]
    assert refused.headers["x-ratelimit-remaining-tokens"] == "0"
    assert int(refused.headers["retry-after"]) >= 1


def test_tpm_refuses_the_first_request_after_the_budget_is_spent(keyed: GatewayProcess) -> None:
    """Within one request: every request admitted before the budget was spent, the next one not."""
    fresh_window()
    first = complete(keyed, "sk-tpm")
    spent = first.json()["usage"]["total_tokens"]
    statuses = [200]
    while statuses[-1] == 200 and len(statuses) < 40:
        answer = complete(keyed, "sk-tpm")
        statuses.append(answer.status_code)
        if answer.status_code == 200:
            assert int(answer.headers["x-ratelimit-remaining-tokens"]) == 40 - spent
            spent += answer.json()["usage"]["total_tokens"]
    assert statuses[-1] == 429
    per_request = first.json()["usage"]["total_tokens"]
    assert 40 <= spent < 40 + per_request  # refused as soon as the budget was spent, not later


def test_concurrency_holds_while_requests_run(keyed: GatewayProcess) -> None:
    body = {"model": SCRIPTED, "prompt": script(20, delay=0.05), "stream": True}
    headers = {"Authorization": "Bearer sk-conc"}
    started = threading.Barrier(3)
    statuses: list[int] = []

    def hold() -> None:
        with httpx.stream("POST", keyed.url + "/v1/completions", json=body, headers=headers, timeout=30) as response:
            started.wait(10)
            statuses.append(response.status_code)
            for _ in response.iter_lines():
                pass

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for thread in threads:
        thread.start()
    started.wait(10)
    refused = complete(keyed, "sk-conc")
    for thread in threads:
        thread.join(30)
    assert statuses == [200, 200]
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert "concurrent requests" in refused.json()["error"]["message"]
    assert complete(keyed, "sk-conc").status_code == 200  # the slots came back


def test_a_model_outside_the_keys_list_does_not_exist_for_it(keyed: GatewayProcess) -> None:
    with openai.OpenAI(base_url=keyed.url + "/v1", api_key="sk-only", max_retries=0, timeout=30) as sdk:
        assert [m.id for m in sdk.models.list()] == [SCRIPTED]
        with pytest.raises(openai.NotFoundError) as outside:
            sdk.chat.completions.create(model="tiny-llm", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.NotFoundError) as unknown:
            sdk.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.NotFoundError):
            sdk.models.retrieve("tiny-llm")
    assert outside.value.body == {  # word for word the answer for a model that does not exist
        **unknown.value.body,  # type: ignore[dict-item]
        "message": "The model 'tiny-llm' does not exist.",
    }
    with openai.OpenAI(base_url=keyed.url + "/v1", api_key="sk-conc", max_retries=0, timeout=30) as sdk:
        assert {"tiny-llm", SCRIPTED} <= {m.id for m in sdk.models.list()}


def test_a_rotated_key_keeps_its_stored_responses(keyed: GatewayProcess) -> None:
    created = post(keyed, "sk-free", {"model": SCRIPTED, "input": script()}, "/v1/responses")
    assert created.status_code == 200
    response_id = created.json()["id"]

    def fetch(key: str) -> int:
        url = f"{keyed.url}/v1/responses/{response_id}"
        return httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code

    assert fetch("sk-free-rotated") == 200  # the same name
    assert fetch("sk-conc") == 404  # another name
    assert fetch("sk-flat") == 404


def test_the_key_file_reloads_under_load_without_a_failed_request(keyed: GatewayProcess, key_path: Path) -> None:
    original = key_path.read_text()
    stop = threading.Event()
    failures: list[int] = []
    served = [0]

    def load() -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                answer = client.post(
                    keyed.url + "/v1/completions",
                    json={"model": SCRIPTED, "prompt": script(2)},
                    headers={"Authorization": "Bearer sk-only"},
                )
                served[0] += 1
                if answer.status_code != 200:
                    failures.append(answer.status_code)

    threads = [threading.Thread(target=load) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        new_key = {"sk-new": ("new-team", "rpm = 100")}
        for round_ in range(4):
            key_path.write_text(key_file({**KEYS, **new_key}) + f"\n# round {round_}\n")
            assert wait_for(lambda: complete(keyed, "sk-new").status_code == 200, timeout=5)
            key_path.write_text(original + f"\n# round {round_}\n")
            assert wait_for(lambda: complete(keyed, "sk-new").status_code == 401, timeout=5)
        key_path.write_text("[[key]\nnot toml")  # a bad file keeps the keys already loaded
        assert wait_for(lambda: "not loaded, the previous keys stay" in keyed.log_text(), timeout=5)
        assert complete(keyed, "sk-only").status_code == 200
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        key_path.write_text(original)
    assert failures == [] and served[0] > 10
    assert wait_for(lambda: complete(keyed, "sk-free").status_code == 200, timeout=5)


# -- across workers and gateways ----------------------------------------------------------------------

_ACCESS_PID = re.compile(r"worker=\d+ pid=(?P<pid>\d+) gateway\.access \[[^\]]*\] (?P<json>\{.*\})$")


def test_limits_hold_across_workers_and_sighup_reloads_every_worker(triton: TritonServer, tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(key_file({"sk-w": ("workers-team", "rpm = 10")}))
    gateway = start_gateway(
        triton.grpc_url,
        tmp_path / "gateway.log",
        "--workers",
        "2",
        "--log-requests",
        "--api-key-policy-file",
        str(path),
        "--api-key-reload-interval",
        "0",
    )
    try:
        assert wait_for(lambda: gateway.log_text().count("Application startup complete") == 2, timeout=60)
        fresh_window()
        answers = [complete(gateway, "sk-w") for _ in range(13)]
        assert [a.status_code for a in answers] == [200] * 10 + [429] * 3
        assert [a.headers["x-ratelimit-remaining-requests"] for a in answers[:10]] == [str(9 - i) for i in range(10)]
        pids = {
            match["pid"]
            for line in gateway.log_text().splitlines()
            if (match := _ACCESS_PID.search(line)) and json.loads(match["json"])["key"] == "workers-team"
        }
        assert len(pids) == 2  # both workers served, and counted together

        path.write_text(key_file({"sk-w": ("workers-team", "rpm = 10"), "sk-w2": ("second-team", "")}))
        gateway.process.send_signal(signal.SIGHUP)
        assert wait_for(lambda: gateway.log_text().count("key file") >= 2, timeout=10)
        assert all(complete(gateway, "sk-w2").status_code == 200 for _ in range(8))  # whichever worker answers
    finally:
        stop_gateway(gateway)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


def test_two_gateways_share_limits_through_redis_and_fail_as_configured_without_it(
    triton: TritonServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(key_file({"sk-r": ("redis-team", "rpm = 6\ntpm = 100000")}))
    common = ["--api-key-policy-file", str(path), "--key-limits-redis-url", redis_server.url]
    fails_open = start_gateway(triton.grpc_url, tmp_path / "open.log", *common)
    fails_closed = start_gateway(
        triton.grpc_url, tmp_path / "closed.log", *common, "--key-limits-redis-failure", "closed"
    )
    try:
        fresh_window()
        answers = [complete(fails_open if i % 2 else fails_closed, "sk-r") for i in range(9)]
        assert [a.status_code for a in answers] == [200] * 6 + [429] * 3
        assert [a.headers["x-ratelimit-remaining-requests"] for a in answers[:6]] == ["5", "4", "3", "2", "1", "0"]
        assert int(answers[5].headers["x-ratelimit-remaining-tokens"]) < 100000  # tokens charged in Redis too

        redis_server.stop()
        uncounted = complete(fails_open, "sk-r")
        assert uncounted.status_code == 200
        assert "x-ratelimit-limit-requests" not in uncounted.headers
        assert "Redis unreachable" in fails_open.log_text()
        refused = complete(fails_closed, "sk-r")
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "rate_limiter_unavailable"
        assert refused.headers["retry-after"] == "1"
    finally:
        stop_gateway(fails_open)
        stop_gateway(fails_closed)
