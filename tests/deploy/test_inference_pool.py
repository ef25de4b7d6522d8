"""The chart's Gateway API Inference Extension objects: an InferencePool over the sidecar pods.

The InferencePool CRD (inference.networking.k8s.io/v1, GIE v1.0) cannot be fetched offline, so
``schemas/inferencepool-v1.json`` holds its spec written from the API's validation markers; every
rendered pool is validated against it. The other tests check what the endpoint picker depends on:
the pool selects exactly the gateway+Triton pods, on the port that serves ``/metrics`` with the
``vllm:*`` gauges, and the chart refuses setups where picking a pod would mean nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest

from tests.deploy.values import merge_values

SCHEMA = json.loads((Path(__file__).parent / "schemas" / "inferencepool-v1.json").read_text())
FULLNAME = "llm-triton-openai-gateway"
NAMESPACE = "inference"
Rendered = Any  # conftest.Rendered
RenderFn = Callable[[dict[str, Any]], Rendered]

SIDECAR = {
    "triton": {"mode": "sidecar", "modelRepository": {"pvc": {"existingClaim": "llm-weights"}}},
    "responsesStore": {"existingSecret": "gateway-store"},
    "gateway": {"replicaCount": 3},
}
POOL = {"inferencePool": {"enabled": True, "endpointPicker": {"serviceName": "llm-epp"}}}
ROUTE = {"httpRoute": {"enabled": True, "parentRefs": [{"name": "inference-gateway", "namespace": "gw"}]}}


def _validate(pool: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(SCHEMA).validate(pool)


def _gateway_pod(r: Rendered) -> dict[str, Any]:
    return r.one("Deployment", FULLNAME)["spec"]["template"]


# ---------------------------------------------------------------------------------------------
# the schema itself: it must be able to fail


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "targetPorts"), []),
        (("spec", "targetPorts"), [{"number": 8000}, {"number": 8001}]),  # v1.0 allows one
        (("spec", "targetPorts", 0, "number"), 70000),
        (("spec", "selector", "matchLabels", "app"), "-bad-"),
        (("spec", "endpointPickerRef", "failureMode"), "FailSoft"),
        (("spec", "endpointPickerRef", "extensionRef"), {"name": "x"}),  # the pre-v1 field
        (("apiVersion",), "inference.networking.x-k8s.io/v1alpha2"),
    ],
)
def test_pool_schema_rejects_what_the_crd_rejects(path: tuple[Any, ...], value: Any) -> None:
    pool = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "p"},
        "spec": {
            "selector": {"matchLabels": {"app": "gw"}},
            "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
        },
    }
    _validate(pool)
    node: Any = pool
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        _validate(pool)


def test_pool_schema_requires_the_port_of_a_service_picker() -> None:
    """The CRD's CEL rule: kind Service (the default) needs port."""
    spec = {"selector": {"matchLabels": {"a": "b"}}, "targetPorts": [{"number": 1}]}
    base = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": "p"}}
    for ref in ({"name": "epp"}, {"name": "epp", "kind": "Service"}):
        with pytest.raises(jsonschema.ValidationError):
            _validate({**base, "spec": {**spec, "endpointPickerRef": ref}})
    _validate({**base, "spec": {**spec, "endpointPickerRef": {"name": "epp", "kind": "Other", "group": "x.io"}}})


# ---------------------------------------------------------------------------------------------
# rendering


@pytest.mark.parametrize("values", [{}, SIDECAR, merge_values(SIDECAR, ROUTE)], ids=["defaults", "sidecar", "route"])
def test_no_inference_extension_objects_unless_enabled(render: RenderFn, values: dict[str, Any]) -> None:
    r = render(values)
    assert r.all("InferencePool") == []
    for route in r.all("HTTPRoute"):
        for backend in route["spec"]["rules"][0]["backendRefs"]:
            assert "kind" not in backend and backend["name"] == FULLNAME
    assert "InferencePool" not in r.notes


def test_enabled_pool_is_valid_and_selects_exactly_the_sidecar_pods(render: RenderFn) -> None:
    r = render(merge_values(SIDECAR, POOL))
    pool = r.one("InferencePool", FULLNAME)
    _validate(pool)
    assert pool["metadata"]["labels"]["app.kubernetes.io/instance"] == "llm"
    spec = pool["spec"]
    # the gateway+Triton pods, and nothing else the release runs
    selector = spec["selector"]["matchLabels"]
    template = _gateway_pod(r)
    assert selector and selector.items() <= template["metadata"]["labels"].items()
    assert {c["name"] for c in template["spec"]["containers"]} == {"gateway", "triton"}
    for deployment in r.all("Deployment"):
        if deployment["metadata"]["name"] != FULLNAME:
            assert not selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    # the port is the gateway's, which serves /metrics (the vllm:* gauges) and the OpenAI API
    (port,) = spec["targetPorts"]
    gateway = next(c for c in template["spec"]["containers"] if c["name"] == "gateway")
    assert port["number"] == next(p["containerPort"] for p in gateway["ports"] if p["name"] == "http")
    assert r.one("ConfigMap", FULLNAME)["data"]["GATEWAY_METRICS_ENABLED"] == "true"
    assert spec["endpointPickerRef"] == {
        "group": "",
        "kind": "Service",
        "name": "llm-epp",
        "port": {"number": 9002},
        "failureMode": "FailClose",
    }
    assert f"--pool-name {FULLNAME} --pool-namespace {NAMESPACE}" in r.notes


def test_pool_follows_gateway_port_name_and_picker_values(render: RenderFn) -> None:
    values = merge_values(
        SIDECAR,
        POOL,
        {
            "gateway": {"port": 9100},
            "inferencePool": {
                "name": "llama-pool",
                "annotations": {"example.com/team": "llm"},
                "endpointPicker": {"port": 9102, "failureMode": "FailOpen"},
            },
        },
    )
    pool = render(values).one("InferencePool", "llama-pool")
    _validate(pool)
    assert pool["spec"]["targetPorts"] == [{"number": 9100}]
    assert pool["spec"]["endpointPickerRef"]["port"] == {"number": 9102}
    assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"
    assert pool["metadata"]["annotations"]["example.com/team"] == "llm"


def test_httproute_sends_requests_to_the_pool_when_enabled(render: RenderFn) -> None:
    r = render(merge_values(SIDECAR, POOL, ROUTE, {"inferencePool": {"name": "llama-pool"}}))
    route = r.one("HTTPRoute")
    (rule,) = route["spec"]["rules"]
    assert rule["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llama-pool"}
    ]
    assert rule["timeouts"]["request"] == "0s"  # streams are still never cut
    assert route["spec"]["parentRefs"] == [{"name": "inference-gateway", "namespace": "gw"}]
    r.one("InferencePool", "llama-pool")
    assert "The HTTPRoute sends requests to the pool" in r.notes


# ---------------------------------------------------------------------------------------------
# refusals


@pytest.mark.parametrize(
    "values",
    [
        POOL,  # managed Triton: the default mode
        merge_values(POOL, {"triton": {"mode": "external", "external": {"url": "triton.gpu.svc:8001"}}}),
    ],
    ids=["managed", "external"],
)
def test_pool_without_sidecar_mode_is_refused_with_the_way_out(
    render: RenderFn, helm: ModuleType, values: dict[str, Any]
) -> None:
    with pytest.raises(helm.HelmRenderError, match="inferencePool.enabled needs triton.mode=sidecar") as failure:
        render(values)
    message = str(failure.value)
    assert "picks the replica itself" in message
    assert "triton.replicaCount" in message and "triton.external.url" in message


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (merge_values(SIDECAR, {"inferencePool": {"enabled": True}}), "needs inferencePool.endpointPicker.serviceName"),
        (merge_values(SIDECAR, POOL, {"gateway": {"metrics": {"enabled": False}}}), "needs gateway.metrics.enabled"),
        (
            merge_values(SIDECAR, POOL, {"gateway": {"extraSettings": {"metrics_require_auth": True}}}),
            "cannot go with gateway.extraSettings.metrics_require_auth",
        ),
    ],
    ids=["no-picker", "no-metrics", "metrics-behind-auth"],
)
def test_pool_the_picker_could_not_use_is_refused(
    render: RenderFn, helm: ModuleType, values: dict[str, Any], expected: str
) -> None:
    with pytest.raises(helm.HelmRenderError, match=expected):
        render(values)


def test_bad_pool_values_fail_the_schema(chart: Any, helm: ModuleType) -> None:
    for bad in (
        {"inferencePool": {"enabled": "yes"}},
        {"inferencePool": {"endpointPicker": {"failureMode": "Open"}}},
        {"inferencePool": {"endpointPicker": {"port": 0}}},
        {"inferencePool": {"name": "Llama_Pool"}},
        {"inferencePool": {"poolName": "x"}},
    ):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(bad)


# ---------------------------------------------------------------------------------------------
# the metrics the endpoint picker reads

METRIC_FLAGS = {  # EPP flag (GIE cmd/epp/runner/options.go) -> inferencePool.metrics key
    "total-queued-requests-metric": "queue",
    "kv-cache-usage-percentage-metric": "kvCacheUsage",
    "lora-info-metric": "loraInfo",
}
EPP_DEFAULTS = {  # the EPP's own defaults for those flags
    "queue": "vllm:num_requests_waiting",
    "kvCacheUsage": "vllm:kv_cache_usage_perc",
    "loraInfo": "vllm:lora_requests_info",
}


def _metric_annotations(pool: dict[str, Any]) -> dict[str, str]:
    prefix = "triton-openai-gateway/"
    return {
        METRIC_FLAGS[name[len(prefix) :]]: value
        for name, value in pool["metadata"]["annotations"].items()
        if name.startswith(prefix)
    }


def _notes_flags(notes: str) -> dict[str, str]:
    """The metric flags of the NOTES' EPP command line, by values key, unquoted as a shell would."""
    found = {}
    for flag, values_key in METRIC_FLAGS.items():
        match = re.search(rf"--{flag}='([^']*)'", notes)
        assert match is not None, f"--{flag} is not on the NOTES' EPP command line"
        found[values_key] = match[1]
    return found


def test_pool_names_the_epp_default_metrics_which_the_gateway_serves(render: RenderFn) -> None:
    r = render(merge_values(SIDECAR, POOL))
    pool = r.one("InferencePool", FULLNAME)
    assert _metric_annotations(pool) == EPP_DEFAULTS
    assert _notes_flags(r.notes) == EPP_DEFAULTS
    # every name is one the gateway's /metrics carries (a scrape before any request or read)
    from prometheus_client import generate_latest

    from gateway.core.admission import Admission
    from gateway.metrics import Metrics

    served = generate_latest(Metrics(Admission(lambda model: (1, 1), 1.0)).registry).decode()
    for name in EPP_DEFAULTS.values():
        assert f"# TYPE {name} gauge" in served, name
    # and the gateway reads the KV figure from the pod's Triton, on the port the chart gives it
    triton = next(c for c in _gateway_pod(r)["spec"]["containers"] if c["name"] == "triton")
    metrics_port = next(p["containerPort"] for p in triton["ports"] if p["name"] == "triton-metrics")
    assert r.one("ConfigMap", FULLNAME)["data"]["GATEWAY_TRITON_METRICS"] == str(metrics_port)


def test_pool_metric_specs_reach_the_annotations_and_the_epp_command_line(render: RenderFn) -> None:
    specs = {
        "queue": "gateway_replica_engine_requests{state=waiting,model=llama}",
        "kvCacheUsage": "vllm:kv_cache_usage_perc{model_name=llama}",
        "loraInfo": "vllm:lora_requests_info",
    }
    values = merge_values(
        SIDECAR,
        POOL,
        {
            "inferencePool": {
                "metrics": specs,
                # the chart's own keys win over the same key given in annotations
                "annotations": {"triton-openai-gateway/lora-info-metric": "other", "example.com/team": "llm"},
            }
        },
    )
    r = render(values)
    pool = r.one("InferencePool", FULLNAME)
    _validate(pool)
    assert _metric_annotations(pool) == specs
    assert pool["metadata"]["annotations"]["example.com/team"] == "llm"
    assert _notes_flags(r.notes) == specs


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "vllm:num_requests_waiting{}",
        'vllm:kv_cache_usage_perc{model_name="llama"}',  # GIE takes label values as written, no quotes
        "vllm:kv_cache_usage_perc{model_name=llama}extra",
        "vllm:kv_cache_usage_perc{model_name=}",
        "9vllm",
        "vllm num_requests_waiting",
        "vllm:x{a=b;c=d}",
        "vllm:x{a=it's}",  # the NOTES quote specs for a shell in single quotes
    ],
)
def test_bad_metric_specs_fail_the_schema(chart: Any, helm: ModuleType, spec: str) -> None:
    for key in EPP_DEFAULTS:
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema({"inferencePool": {"metrics": {key: spec}}})


def test_metric_specs_are_the_three_the_chart_knows(chart: Any, helm: ModuleType) -> None:
    chart.validate_schema({"inferencePool": {"metrics": {"queue": "a:b{c=d,e=f}"}}})
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"inferencePool": {"metrics": {"running": "vllm:num_requests_running"}}})
