"""The chart's metrics with API keys on: /metrics on a port of its own (``gateway.metrics.port``,
``GATEWAY_METRICS_PORT``) that the ServiceMonitor scrapes without a key, and the combinations
that could not be scraped failing at render with a message that says what to set."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from tests.deploy.conftest import Rendered
from tests.deploy.test_chart import AUTH_VALUES, FULLNAME, MONITORING, SIDECAR
from tests.deploy.test_inference_pool import POOL
from tests.deploy.values import merge_values

RenderFn = Callable[[dict[str, Any]], Rendered]
PORT = 9464


def test_a_metrics_port_is_what_the_service_monitor_scrapes(render: RenderFn) -> None:
    r = render(merge_values(AUTH_VALUES, MONITORING, {"gateway": {"metrics": {"port": PORT}}}))
    assert r.one("ConfigMap", FULLNAME)["data"]["GATEWAY_METRICS_PORT"] == str(PORT)
    (container,) = [
        c for c in r.one("Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"] if c["name"] == "gateway"
    ]
    assert {"name": "metrics", "containerPort": PORT, "protocol": "TCP"} in container["ports"]
    service_ports = {p["name"]: p for p in r.one("Service", FULLNAME)["spec"]["ports"]}
    assert service_ports["metrics"]["port"] == PORT and service_ports["metrics"]["targetPort"] == "metrics"
    (endpoint,) = r.one("ServiceMonitor", FULLNAME)["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")


def test_without_a_metrics_port_nothing_changes(render: RenderFn) -> None:
    r = render(MONITORING)
    assert "GATEWAY_METRICS_PORT" not in r.one("ConfigMap", FULLNAME)["data"]
    assert "metrics" not in {p["name"] for p in r.one("Service", FULLNAME)["spec"]["ports"]}
    assert r.one("ServiceMonitor", FULLNAME)["spec"]["endpoints"][0]["port"] == "http"


def test_the_pool_opens_metrics_on_the_gateway_port_to_the_endpoint_picker(render: RenderFn) -> None:
    r = render(merge_values(SIDECAR, POOL, AUTH_VALUES))
    assert r.one("ConfigMap", FULLNAME)["data"]["GATEWAY_METRICS_REQUIRE_AUTH"] == "false"


def test_with_keys_the_service_monitor_scrapes_a_port_of_its_own_by_default(render: RenderFn) -> None:
    r = render(merge_values(AUTH_VALUES, MONITORING))
    assert r.one("ConfigMap", FULLNAME)["data"]["GATEWAY_METRICS_PORT"] == "9464"
    assert r.one("ServiceMonitor", FULLNAME)["spec"]["endpoints"][0]["port"] == "metrics"
    assert "metrics" in {p["name"] for p in r.one("Service", FULLNAME)["spec"]["ports"]}


def test_a_metrics_port_with_the_pool_fails_at_render(render: RenderFn, helm: ModuleType) -> None:
    values = merge_values(SIDECAR, POOL, {"gateway": {"metrics": {"port": PORT}}})
    with pytest.raises(
        helm.HelmRenderError, match=re.escape("inferencePool.enabled cannot go with gateway.metrics.port")
    ):
        render(values)
