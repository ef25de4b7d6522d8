"""The dashboard and the alert rules against a real Prometheus scraping a real gateway.

A private Prometheus (Debian's ``prometheus``) scrapes the gateway's metrics port and both Triton
replicas' every second, and evaluates the chart's PrometheusRule, rendered with short ``for``
durations and low thresholds, every second. The gateway runs with API keys whose limits are
counted in a real Redis, a small slot limit and queue, and two Tritons of its own. A short load
makes every event the dashboard and the alerts read happen, twice, a few scrapes apart (a counter
first seen at its final value shows no ``rate``): Triton errors, 404s and 400s, a key over its
limit, streams that fill the queue and get shed, requests that hold a model's queue full for
seconds, a client that leaves mid-stream; then one replica is killed under streams that move to
the other, and Redis is stopped.

Then every panel query of the dashboard (its variables at "All") must return series, every
variable must find values, and every alert rule must evaluate without error; the last replica is
killed under a stream, which is lost, and the gateway is stopped. By then every alert of the
chart must have fired (Prometheus keeps ``ALERTS`` in its TSDB), and the texts of those still
active must expand. A typo'd metric or label in a panel or a rule fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from gateway.keys.policy import hash_key
from gateway.triton_launcher import TritonServer, free_port
from tests.integration.conftest import (
    REFERENCE_REPOSITORY,
    TEST_REPOSITORY,
    GatewayProcess,
    start_gateway,
    stop_gateway,
    stop_in_background,
    wait_for,
)
from tests.prometheus_server import PrometheusServer
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "triton-openai-gateway.json"
CHART = ROOT / "deploy" / "helm" / "triton-openai-gateway"
RELEASE, NAMESPACE = "llm", "inference"
MODEL, SCRIPTED = "tiny-llm", "scripted"
KEYS = {"sk-team-a": ("team-a", "rpm = 100000"), "sk-team-b": ("team-b", "rpm = 1")}
VARIABLES = {"$model": ".*", "$key": ".*", "$pod": ".*", "$__rate_interval": "1m"}
"""What the dashboard's variables stand for here: every value ("All"), and a rate window of
several scrapes."""
GPU_ONLY = re.compile(r"\bnv_gpu_\w+")
"""Triton's GPU series: none on this CPU machine, so a query of those alone may come back empty."""
FIRING_HERE = {
    "GatewayAbsent",
    "GatewayDown",
    "GatewayNotReady",
    "ReplicaOutOfPool",
    "QueueFull",
    "RequestsShed",
    "HighErrorRatio",
    "HighTimeToFirstToken",
    "KeyThrottled",
    "KeyLimitsStoreFailing",
    "StreamsLost",
    "EngineKVCacheSaturated",
}
"""The alerts this test's events trip (with the test's thresholds): all of them. ``GatewayAbsent``
fires while Prometheus has not yet scraped the gateway (its target discovery takes a few seconds,
and the rules run from its start)."""


def _triton(base: Path, i: int) -> TritonServer:
    return TritonServer(
        REFERENCE_REPOSITORY,
        log_file=base / f"triton-{i}.log",
        extra_args=(
            f"--model-repository={TEST_REPOSITORY}",
            "--model-control-mode=explicit",
            f"--load-model={MODEL}",
            f"--load-model={SCRIPTED}",
        ),
    )


def rendered_rules(values: dict[str, Any]) -> dict[str, Any]:
    """The chart's PrometheusRule with ``values``, as a plain rules file (its ``spec``)."""
    import helm_python

    chart = helm_python.Chart.load(str(CHART))
    try:
        chart.validate_schema(values)
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    finally:
        chart.close()
    rules = [
        doc
        for path, text in manifests.items()
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc and doc.get("kind") == "PrometheusRule"
    ]
    assert len(rules) == 1, f"expected one PrometheusRule, found {len(rules)}"
    return rules[0]["spec"]  # type: ignore[no-any-return]


GATEWAY_JOB = "gw"
FAST_ALERTS: dict[str, Any] = {
    "gateway": {
        "metrics": {
            "prometheusRule": {
                "enabled": True,
                "selector": f'job="{GATEWAY_JOB}", namespace="{NAMESPACE}"',
                "rateWindow": "1m",
                "alerts": {
                    "gatewayDown": {"for": "0s"},
                    "gatewayAbsent": {"for": "0s"},
                    "gatewayNotReady": {"for": "0s"},
                    "replicaOutOfPool": {"for": "0s"},
                    "queueFull": {"for": "0s", "ratio": 0.5},
                    "requestsShed": {"for": "0s", "threshold": 0},
                    "highErrorRatio": {"for": "0s", "threshold": 0},
                    "highTimeToFirstToken": {"for": "0s", "threshold": 0.0001},
                    "keyThrottled": {"for": "0s", "threshold": 0},
                    "keyLimitsStoreFailing": {"for": "0s", "threshold": 0},
                    "streamsLost": {"for": "0s", "threshold": 0},
                    "engineKVCacheSaturated": {"for": "0s", "ratio": 0.001},
                },
            }
        }
    }
}
"""The chart's alerts as this test renders them: at once (``for: 0s``), on a 1m window, and at
thresholds this short load crosses; the default thresholds are ``promtool test rules``' to prove."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The peers, each stopped at the end however far the setup got (a setup that fails half-way
    must not leave Tritons, Redis or a gateway running)."""
    base = tmp_path_factory.mktemp("prometheus")
    with contextlib.ExitStack() as cleanup:
        tritons = [_triton(base, i) for i in range(2)]
        cleanup.callback(stop_in_background, *tritons)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: s.start(), tritons))
        redis = RedisServer(base / "redis")
        cleanup.callback(redis.stop)
        redis.start()
        keys = base / "keys.toml"
        keys.write_text(
            "\n".join(
                f'[[key]]\nname = "{name}"\nsha256 = ["{hash_key(key)}"]\n{limits}\n'
                for key, (name, limits) in KEYS.items()
            )
        )
        (base / "rules.yaml").write_text(yaml.safe_dump(rendered_rules(FAST_ALERTS), sort_keys=False))
        metrics_port = free_port()
        gateway = start_gateway(
            ",".join(t.grpc_url for t in tritons),
            base / "gateway.log",
            "--triton-metrics",
            ",".join(str(t.metrics_port) for t in tritons),
            "--api-key-policy-file",
            str(keys),
            "--key-limits-redis-url",
            redis.url,
            "--metrics-port",
            str(metrics_port),
            "--max-concurrent-requests",
            "4",
            "--max-queue-size",
            "4",
        )
        cleanup.callback(stop_gateway, gateway)
        prometheus = PrometheusServer(
            base / "prom",
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(base / "rules.yaml")],
                "scrape_configs": [
                    {
                        "job_name": GATEWAY_JOB,
                        "static_configs": [
                            {
                                "targets": [f"127.0.0.1:{metrics_port}"],
                                "labels": {"namespace": NAMESPACE, "pod": "gw-0"},
                            }
                        ],
                    },
                    {
                        "job_name": "triton",
                        "static_configs": [
                            {
                                "targets": [f"127.0.0.1:{t.metrics_port}" for t in tritons],
                                "labels": {"namespace": NAMESPACE},
                            }
                        ],
                    },
                ],
            },
        )
        cleanup.callback(prometheus.stop)
        prometheus.start()
        # Its first scrapes wait for target discovery (a few seconds): a load before them would
        # be its first sample, with no rate.
        scraped = wait_for(lambda: len(prometheus.query("up == 1")) == 3, timeout=30, interval=0.2)
        assert scraped, prometheus.api("targets")
        yield {
            "tritons": tritons,
            "redis": redis,
            "gateway": gateway,
            "prometheus": prometheus,
            "metrics_url": f"http://127.0.0.1:{metrics_port}/metrics",
        }


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _stream(client: openai.AsyncOpenAI, i: int, tokens: int) -> str:
    """One chat stream to its end; ``shed`` when the scheduler refused it."""
    try:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"Tell story {i} at length."}],
            max_tokens=tokens,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for _ in stream:
            pass
    except openai.RateLimitError:
        return "shed"
    return "done"


async def _wave(gateway: GatewayProcess) -> list[str]:
    """One round of every event: Triton errors, an unknown model, a bad body; the limited key over
    its limit; 12 streams on 4 slots and 4 places (the rest shed); 8 requests that hold the
    scripted model's 4 slots for 3 s, so that its queue stays full for several scrapes however
    slow the machine; a client that leaves mid-stream."""
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="sk-team-a", max_retries=0)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        answers = []
        failing = json.dumps({"responses": [{"utf8": ["x"]}], "error": {"message": "boom", "after": 0}})
        for body in (
            {"model": "no-such-model", "prompt": "hi"},
            {"model": MODEL, "prompt": "hi", "max_tokens": -3},
            {"model": SCRIPTED, "prompt": failing},
            {"model": SCRIPTED, "prompt": failing},
        ):
            answers.append(await http.post("/v1/completions", json=body, headers=_headers("sk-team-a")))
        # The key with rpm = 1, three times at once: at least one 429 even across a minute's end.
        quick = {"model": SCRIPTED, "prompt": json.dumps({"responses": [{"utf8": ["x"]}]})}
        answers += await asyncio.gather(
            *(http.post("/v1/completions", json=quick, headers=_headers("sk-team-b")) for _ in range(3))
        )
        holding = json.dumps({"responses": [{"utf8": ["x"]}], "hang": 3.0})
        held = asyncio.gather(
            *(
                http.post("/v1/completions", json={"model": SCRIPTED, "prompt": holding}, headers=_headers("sk-team-a"))
                for _ in range(8)
            )
        )
        streams = asyncio.gather(*(_stream(client, i, 200) for i in range(12)))
        outcomes = await streams
        assert [a.status_code for a in await held] == [200] * 8
        async with http.stream(  # after the flood, so that it gets a slot
            "POST",
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "go"}], "max_tokens": 500, "stream": True},
            headers=_headers("sk-team-a"),
        ) as leaving:
            assert leaving.status_code == 200
            async for _ in leaving.aiter_lines():
                break
    await client.close()
    statuses = [a.status_code for a in answers]
    assert statuses[:2] == [404, 400] and min(statuses[2:4]) >= 500 and 429 in statuses[4:], statuses
    return outcomes


async def _moved_streams(gateway: GatewayProcess, metrics_url: str, victim: TritonServer) -> list[str]:
    """Four long streams; once the victim runs some, it is killed and they move."""
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="sk-team-a", max_retries=0)
    streams = asyncio.gather(*(_stream(client, 100 + i, 1500) for i in range(4)))
    metrics = httpx.AsyncClient(timeout=10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        page = (await metrics.get(metrics_url)).text
        running = re.search(rf'gateway_replica_in_flight\{{replica="{re.escape(victim.grpc_url)}"\}} (\S+)', page)
        if running and float(running.group(1)) > 0:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # a few tokens each
    victim.kill()
    outcomes = await streams
    await metrics.aclose()
    await client.close()
    return outcomes


def _lose_a_stream(gateway: GatewayProcess, last: TritonServer) -> None:
    """A stream on the last replica, which is killed under it: the stream cannot move and ends
    with an error event, in a complete SSE body."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "go on"}], "max_tokens": 3000, "stream": True}
    with httpx.stream(
        "POST", gateway.url + "/v1/chat/completions", json=body, headers=_headers("sk-team-a"), timeout=60
    ) as answer:
        assert answer.status_code == 200
        lines = answer.iter_lines()
        assert next(line for line in lines if line.startswith("data: {"))
        last.kill()
        rest = list(lines)
    frames = [line for line in rest if line]
    assert frames[-1].startswith('data: {"error"'), frames[-3:]  # read to the body's end: complete


def _firing(prometheus: PrometheusServer) -> set[str]:
    """The alerts that fired at any time in the last 10 minutes (``ALERTS`` is in the TSDB)."""
    found = prometheus.query('max_over_time(ALERTS{alertstate="firing"}[10m])')
    return {sample["metric"]["alertname"] for sample in found}


def _panel_queries() -> list[tuple[str, str]]:
    """(panel title, expr) for every target of every panel, rows' nested panels included."""
    dashboard = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                expr = target["expr"]
                for variable, value in VARIABLES.items():
                    expr = expr.replace(variable, value)
                out.append((panel.get("title", "?"), expr))

    walk(dashboard["panels"])
    return out


def _variable_queries() -> list[tuple[str, str, str]]:
    """(variable, series selector, label) of every ``label_values`` variable of the dashboard."""
    out = []
    for variable in json.loads(DASHBOARD.read_text())["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        query = query["query"] if isinstance(query, dict) else query
        found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query.strip())
        assert found, f"variable {variable['name']}: not a label_values query: {query}"
        out.append((variable["name"], found.group(1), found.group(2)))
    return out


def test_every_panel_and_alert_evaluates_on_real_scraped_metrics(stack: dict[str, Any]) -> None:
    gateway: GatewayProcess = stack["gateway"]
    prometheus: PrometheusServer = stack["prometheus"]
    tritons: list[TritonServer] = stack["tritons"]
    for _ in range(2):
        outcomes = asyncio.run(_wave(gateway))
        assert "shed" in outcomes and "done" in outcomes, outcomes
        time.sleep(2.5)  # two scrapes between the waves: each counter moves between two samples
    moved = asyncio.run(_moved_streams(gateway, stack["metrics_url"], tritons[0]))
    assert moved == ["done"] * 4, moved
    stack["redis"].stop()
    for _ in range(3):  # counted without Redis (fails open), and its failures counted
        answer = httpx.post(
            gateway.url + "/v1/completions",
            json={"model": MODEL, "prompt": "hi", "max_tokens": 2},
            headers=_headers("sk-team-a"),
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        time.sleep(1.2)
    time.sleep(3)

    empty = []
    for title, expr in _panel_queries():
        if not prometheus.query(expr) and not (GPU_ONLY.search(expr) and not re.search(r"\b(gateway_|vllm:)", expr)):
            empty.append(f"{title}: {expr}")
    assert not empty, "panel queries with no series:\n" + "\n".join(empty)

    for name, selector, label in _variable_queries():  # what Grafana asks for the variable's choices
        values = [v for v in prometheus.api(f"label/{label}/values", **{"match[]": selector}) if v]
        assert values, f"variable {name}: no {label} values on {selector}"

    groups = prometheus.api("rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert rules, "Prometheus loaded no rules"
    broken = [f"{r['name']}: {r.get('lastError')}" for r in rules if r["health"] != "ok"]
    assert not broken, broken

    _lose_a_stream(gateway, tritons[1])  # no replica left to continue it on, and none ready
    assert wait_for(lambda: "GatewayNotReady" in _firing(prometheus), timeout=40), _firing(prometheus)
    stop_gateway(gateway)
    assert wait_for(lambda: "GatewayDown" in _firing(prometheus), timeout=20), _firing(prometheus)
    alerts = {rule["name"] for rule in rules if rule["type"] == "alerting"}
    assert alerts == FIRING_HERE, "an alert this test does not make fire, or one gone from the chart"
    active = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"] if rule.get("alerts")]
    assert active
    for rule in active:  # the active alerts' texts, as Alertmanager would get them
        for alert in rule["alerts"]:
            texts = " ".join(alert["annotations"].values())
            assert "error expanding" not in texts and "<no value>" not in texts, (rule["name"], alert["annotations"])
    missing = FIRING_HERE - _firing(prometheus)
    exprs = {rule["name"]: rule["query"] for rule in rules}
    seen = {name: prometheus.query(f"max_over_time(({exprs[name]})[10m:1s])") for name in missing}
    assert not missing, f"alerts that did not fire: {missing}; fired: {_firing(prometheus)}; their exprs saw {seen}"
