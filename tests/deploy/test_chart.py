"""The Helm chart in deploy/helm, rendered by a real Helm engine and validated offline.

Every scenario is linted, rendered (schema check first, like ``helm install``), and each core
object is validated strictly against the Kubernetes schemas of the oldest and newest versions
the chart supports; CRD objects (ServiceMonitor, HTTPRoute) are checked structurally. The other
tests assert the properties a deployment depends on.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.deploy.values import TRTLLM_SCENARIOS, merge_values

CHART_DIR = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "triton-openai-gateway"
NAMESPACE = "inference"  # the namespace conftest's render fixture uses
Rendered = Any  # conftest.Rendered (test modules do not import each other)

KUBE_VERSIONS = ("1.25.0", "1.37.0")
CRD_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ("inference.networking.k8s.io/v1", "InferencePool"),  # its schema: test_inference_pool.py
}
FULLNAME = "llm-triton-openai-gateway"
TRITON_NAME = "llm-triton-openai-gateway-triton"
TRITON_HEADLESS = "llm-triton-openai-gateway-triton-headless"
EXTERNAL_URL = "triton.gpu-pool.svc.cluster.local:8001"
API_KEYS = ["sk-test-4f9c2d1e", "sk-test-77ab03c9"]
API_KEY_SECRET = f"{FULLNAME}-api-keys"
REASONING_SECRET = f"{FULLNAME}-reasoning"
REASONING_EXISTING_KEY = "secrets"


EXTERNAL = {"triton": {"mode": "external", "external": {"url": EXTERNAL_URL}}}
SIDECAR = {
    "triton": {"mode": "sidecar", "modelRepository": {"pvc": {"existingClaim": "llm-weights"}}},
    "autoscaling": {"enabled": False},
    "gateway": {"replicaCount": 1},
}
INGRESS = {
    "ingress": {"enabled": True, "className": "nginx", "tls": [{"secretName": "llm-tls", "hosts": ["llm.example.com"]}]}
}
HTTPROUTE = {
    "httpRoute": {
        "enabled": True,
        "hostnames": ["llm.example.com"],
        "parentRefs": [{"name": "public", "namespace": "gateway-system"}],
    }
}
AUTH_VALUES = {"auth": {"enabled": True, "apiKeys": API_KEYS}}
AUTH_EXISTING = {"auth": {"enabled": True, "existingSecret": "gateway-api-keys", "secretKey": "keys.txt"}}
STORE_MOUNT = "/var/lib/triton-openai-gateway"  # the image's state directory (Dockerfile)
STORE_SECRET = {"responsesStore": {"existingSecret": "gateway-store", "secretKey": "postgres-url"}}
# Several pods need a store they share: PostgreSQL, its URL from a Secret.
AUTOSCALED = merge_values(
    STORE_SECRET,
    {
        "autoscaling": {"enabled": True},
        "responsesStore": {"ttl": 86400, "max": 50000},
        "batches": {"concurrency": 32, "maxConcurrency": 4, "maxFileBytes": 104857600, "retention": 604800},
    },
)
THREE_REPLICAS = merge_values(STORE_SECRET, {"gateway": {"replicaCount": 3}})
MONITORING = {"gateway": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}}
# Several chart-run Triton replicas, the gateway routing across them.
ROUTING = {"policy": "prefix", "prefixChars": 2048, "loadFactor": 1.5, "resolveInterval": 2}
TRITON_REPLICAS = merge_values(MONITORING, {"triton": {"replicaCount": 3}, "gateway": {"routing": ROUTING}})

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "external": EXTERNAL,
    "external-with-model-volume": merge_values(
        EXTERNAL, {"gateway": {"modelRepository": {"existingClaim": "models-ro"}}}
    ),
    "managed-existing-pvc": {
        "triton": {"modelRepository": {"pvc": {"existingClaim": "llm-weights", "subPath": "prod"}}}
    },
    "managed-image": merge_values(
        MONITORING,
        {
            "triton": {
                "replicaCount": 2,
                "modelRepository": {
                    "source": "image",
                    "image": {"repository": "registry.example.com/models/llama-3.1-8b", "tag": "v3"},
                },
            }
        },
    ),
    "managed-replicas": TRITON_REPLICAS,
    "external-replicas": merge_values(
        EXTERNAL, {"triton": {"external": {"url": "dns:///triton-headless.gpu-pool.svc.cluster.local:8001"}}}
    ),
    "sidecar": merge_values(SIDECAR, MONITORING),
    "ingress": INGRESS,
    "httproute": HTTPROUTE,
    "auth-values": AUTH_VALUES,
    "auth-existing-secret": AUTH_EXISTING,
    "autoscaled": AUTOSCALED,
    "three-replicas": THREE_REPLICAS,
    "three-replicas-no-store": {"gateway": {"replicaCount": 3}, "responsesStore": {"enabled": False}},
    "store-pvc": {"responsesStore": {"persistence": {"enabled": True, "size": "5Gi", "storageClassName": "fast-ssd"}}},
    "store-existing-claim": merge_values(
        EXTERNAL, {"responsesStore": {"persistence": {"enabled": True, "existingClaim": "gateway-state"}}}
    ),
    # A passwordless URL may sit in the ConfigMap; libpq takes the password from PGPASSWORD.
    "store-postgres-url": {
        "gateway": {
            "replicaCount": 2,
            "extraEnv": [
                {"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "pg-gateway", "key": "password"}}}
            ],
        },
        "responsesStore": {"url": "postgresql://gateway@pg.db.svc:5432/gateway?sslmode=require"},
    },
    "extra-settings": {
        "gateway": {
            "shutdownGracePeriod": 120,
            "extraSettings": {"max_concurrent_requests": 64, "log_requests": True, "max_tokens_limit": 4096},
        }
    },
    "custom-ports": {
        "gateway": {
            "port": 9000,
            "requestTimeout": 900,
            "defaultMaxTokens": 512,
            "streamCoalesceInterval": 0.002,
            "corsOrigins": ["https://app.example.com"],
        },
        "service": {"port": 80},
    },
    "everything-external": merge_values(EXTERNAL, INGRESS, HTTPROUTE, AUTH_EXISTING, THREE_REPLICAS, MONITORING),
    "everything-sidecar": merge_values(SIDECAR, INGRESS, AUTH_VALUES, {"gateway": {"port": 8100}}),
    "sidecar-inference-pool": merge_values(
        SIDECAR,
        STORE_SECRET,
        HTTPROUTE,
        {
            "gateway": {"replicaCount": 3},
            "inferencePool": {"enabled": True, "endpointPicker": {"serviceName": "llm-epp"}},
        },
    ),
    "reasoning-existing-secret": {
        "gateway": {"reasoningSecret": {"existingSecret": "gw-reasoning", "key": REASONING_EXISTING_KEY}}
    },
    **TRTLLM_SCENARIOS,  # each TensorRT-LLM layout; their own checks: test_tensorrt_llm.py
}

RenderFn = Callable[[dict[str, Any]], Rendered]


@pytest.fixture(scope="module")
def rendered(render: RenderFn) -> dict[str, Rendered]:
    return {name: render(values) for name, values in SCENARIOS.items()}


# ---------------------------------------------------------------------------------------------
# helpers


def _gateway_deployment(r: Rendered) -> dict[str, Any]:
    return r.one("Deployment", FULLNAME)


def _pod(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]


def _container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    containers = {c["name"]: c for c in _pod(deployment)["containers"]}
    assert name in containers, f"no container {name!r} in {sorted(containers)}"
    return containers[name]


def _settings(r: Rendered) -> dict[str, str]:
    return r.one("ConfigMap", FULLNAME)["data"]


def _named_port(container: dict[str, Any], port: str | int) -> int:
    if isinstance(port, int):
        return port
    numbers = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert numbers, f"port {port!r} is not declared by container {container['name']}"
    return int(numbers[0])


def _service_port(service: dict[str, Any], name: str) -> dict[str, Any]:
    ports = [p for p in service["spec"]["ports"] if p["name"] == name]
    assert len(ports) == 1, f"service {service['metadata']['name']} has no port {name}"
    return ports[0]


def _service_of_url(r: Rendered, url: str) -> tuple[dict[str, Any], int]:
    """The rendered Service GATEWAY_TRITON_URL names and its port, as cluster DNS would resolve
    it: a bare Service name (same namespace), or dns:///<service>.<namespace>.svc.<domain>."""
    target, port = url.removeprefix("dns:///").rsplit(":", 1)
    if url.startswith("dns:///"):
        name, namespace, svc, domain = target.split(".", 3)
        assert (namespace, svc, domain) == (NAMESPACE, "svc", "cluster.local"), url
    else:
        name = target
    return r.one("Service", name), int(port)


def _secret_names(r: Rendered) -> list[str]:
    return sorted(s["metadata"]["name"] for s in r.all("Secret"))


def _selects(selector: dict[str, str], deployment: dict[str, Any]) -> bool:
    return selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


# ---------------------------------------------------------------------------------------------
# lint, schema, Kubernetes validation


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_helm_lint_strict_reports_no_warning_or_error(helm: ModuleType, scenario: str) -> None:
    report = helm.lint(str(CHART_DIR), SCENARIOS[scenario], strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], json.dumps(report, indent=2)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_core_objects_validate_strictly_against_kubernetes_schemas(
    rendered: dict[str, Rendered], kubernetes_validate: ModuleType, scenario: str
) -> None:
    objects = rendered[scenario].objects
    assert objects
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} invalid for {version} at {path}: {exc.message}")


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_object_is_known_and_labelled(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    for obj in r.objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "triton-openai-gateway"
        assert labels["app.kubernetes.io/instance"] == "llm"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"]
        assert labels["helm.sh/chart"].startswith("triton-openai-gateway-")
        assert len(obj["metadata"]["name"]) <= 63


def test_default_values_pass_the_schema_and_unknown_keys_do_not(chart: Any, helm: ModuleType) -> None:
    chart.validate_schema({})
    for bad in (
        {"gateway": {"prot": 8000}},
        {"triton": {"mode": "embedded"}},
        {"gateway": {"port": "8000"}},
        {"httpRoute": {"timeouts": {"request": "forever"}}},
    ):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(bad)


@pytest.mark.parametrize(
    "bad",
    [
        {"policy": "random"},
        {"policy": "Affinity"},  # the gateway's names, as it spells them
        {"policy": "least-loaded"},
        {"policy": 1},
        {"prefixChars": 100},
        {"prefixChars": 512.5},
        {"loadFactor": 0.8},  # below 1 a replica could take less than its share
        {"resolveInterval": 0},
        {"interval": 5},
    ],
)
def test_bad_routing_values_are_refused_by_the_schema(chart: Any, helm: ModuleType, bad: dict[str, Any]) -> None:
    chart.validate_schema({"gateway": {"routing": ROUTING}})
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"gateway": {"routing": bad}})


def _key_lines(text: str) -> list[tuple[tuple[str, ...], bool]]:
    """(path, has a comment right above) for every mapping key of values.yaml (list items skipped)."""
    stack: list[tuple[int, str]] = []
    out: list[tuple[tuple[str, ...], bool]] = []
    previous = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        match = re.match(r"^( *)([A-Za-z0-9_.\-/]+):(\s|$)", line)
        if match and not stripped.startswith("#"):
            indent = len(match.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            path = (*(k for _, k in stack), match.group(2))
            out.append((path, previous.startswith("#")))
            stack.append((indent, match.group(2)))
        elif stripped.startswith("- ") and not stripped.startswith("#"):
            indent = len(line) - len(line.lstrip())
            while stack and stack[-1][0] > indent:
                stack.pop()
            stack.append((indent + 1, "[]"))
        previous = stripped
    return out


def test_values_yaml_comments_every_key_the_schema_describes(chart: Any) -> None:
    text = (CHART_DIR / "values.yaml").read_text()
    schema = chart.schema
    undocumented = []
    for path, commented in _key_lines(text):
        node = schema
        for part in path[:-1]:
            node = node.get("properties", {}).get(part, {})
        if "properties" not in node:  # inside free-form data (resources, annotations, lists)
            continue
        assert path[-1] in node["properties"], f"values.yaml key {'.'.join(path)} is not in the schema"
        if not commented:
            undocumented.append(".".join(path))
    assert undocumented == [], f"keys without a comment line right above: {undocumented}"


# ---------------------------------------------------------------------------------------------
# the gateway container


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_probe_paths_and_ports_follow_gateway_port(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    settings = _settings(r)
    deployment = _gateway_deployment(r)
    gateway = _container(deployment, "gateway")
    port = int(settings["GATEWAY_PORT"])
    assert settings["GATEWAY_HOST"] == "0.0.0.0"
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/health"
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    for probe in ("livenessProbe", "readinessProbe"):
        assert _named_port(gateway, gateway[probe]["httpGet"]["port"]) == port
    service = r.one("Service", FULLNAME)
    assert _named_port(gateway, _service_port(service, "http")["targetPort"]) == port
    expected = SCENARIOS[scenario].get("gateway", {}).get("port", 8000)
    assert port == expected


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_gateway_runs_non_root_with_read_only_root_filesystem(rendered: dict[str, Rendered], scenario: str) -> None:
    deployment = _gateway_deployment(rendered[scenario])
    pod = _pod(deployment)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    gateway = _container(deployment, "gateway")
    context = gateway["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert {"name": "tmp", "mountPath": "/tmp"} in gateway["volumeMounts"]
    assert gateway["resources"]["requests"] and gateway["resources"]["limits"]
    for container in pod["containers"] + pod.get("initContainers", []):
        assert container["securityContext"]["runAsNonRoot"] is True, container["name"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, container["name"]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_settings_reach_the_gateway_only_through_the_configmap(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    gateway = _container(_gateway_deployment(r), "gateway")
    assert gateway["envFrom"] == [{"configMapRef": {"name": FULLNAME}}]
    assert all(key.startswith("GATEWAY_") for key in _settings(r))
    assert all(isinstance(value, str) for value in _settings(r).values())


def test_optional_settings_are_set_only_when_given(rendered: dict[str, Rendered]) -> None:
    defaults = _settings(rendered["defaults"])
    for unset in (
        "GATEWAY_REQUEST_TIMEOUT",
        "GATEWAY_DEFAULT_MAX_TOKENS",
        "GATEWAY_CORS_ORIGINS",
        "GATEWAY_API_KEY_FILE",
        "GATEWAY_RESPONSES_STORE_TTL",
        "GATEWAY_RESPONSES_STORE_MAX",
        "GATEWAY_ROUTING_POLICY",
        "GATEWAY_ROUTING_PREFIX_CHARS",
        "GATEWAY_ROUTING_LOAD_FACTOR",
        "GATEWAY_TRITON_RESOLVE_INTERVAL",
        "GATEWAY_STREAM_COALESCE_INTERVAL",
        "GATEWAY_BATCH_CONCURRENCY",
        "GATEWAY_BATCH_MAX_CONCURRENCY",
        "GATEWAY_BATCH_MAX_FILE_BYTES",
        "GATEWAY_JOBS_RETENTION",
    ):
        assert unset not in defaults
    custom = _settings(rendered["custom-ports"])
    assert custom["GATEWAY_REQUEST_TIMEOUT"] == "900"
    assert custom["GATEWAY_STREAM_COALESCE_INTERVAL"] == "0.002"
    assert custom["GATEWAY_DEFAULT_MAX_TOKENS"] == "512"
    assert json.loads(custom["GATEWAY_CORS_ORIGINS"]) == ["https://app.example.com"]
    assert _service_port(rendered["custom-ports"].one("Service", FULLNAME), "http")["port"] == 80


def test_every_variable_the_chart_sets_is_a_gateway_setting(rendered: dict[str, Rendered]) -> None:
    from gateway.config import ENV_PREFIX, Settings

    known = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
    used = {key for r in rendered.values() for key in _settings(r)}
    assert used - known == set(), f"the chart sets variables gateway/config.py does not know: {sorted(used - known)}"
    settings = Settings(
        **{  # every value the chart renders must parse as the gateway would
            key[len(ENV_PREFIX) :].lower(): (json.loads(value) if value.startswith("[") else value)
            for key, value in _settings(rendered["extra-settings"]).items()
        }
    )
    assert settings.max_concurrent_requests == 64 and settings.log_requests is True
    assert settings.shutdown_grace_period == 120


def test_routing_values_reach_the_gateway_as_it_parses_them(rendered: dict[str, Rendered]) -> None:
    from gateway.config import Settings

    settings = _settings(rendered["managed-replicas"])
    assert settings["GATEWAY_ROUTING_POLICY"] == "prefix"
    assert settings["GATEWAY_ROUTING_PREFIX_CHARS"] == "2048"
    assert settings["GATEWAY_ROUTING_LOAD_FACTOR"] == "1.5"
    assert settings["GATEWAY_TRITON_RESOLVE_INTERVAL"] == "2"
    parsed = Settings(
        triton_url=settings["GATEWAY_TRITON_URL"],
        triton_resolve_interval=settings["GATEWAY_TRITON_RESOLVE_INTERVAL"],
        routing_policy=settings["GATEWAY_ROUTING_POLICY"],
        routing_prefix_chars=settings["GATEWAY_ROUTING_PREFIX_CHARS"],
        routing_load_factor=settings["GATEWAY_ROUTING_LOAD_FACTOR"],
    )
    assert parsed.triton_url == f"dns:///{TRITON_HEADLESS}.{NAMESPACE}.svc.cluster.local:8001"
    assert parsed.triton_resolve_interval == 2.0
    assert parsed.routing_policy == "prefix"
    assert parsed.routing_prefix_chars == 2048 and parsed.routing_load_factor == 1.5


def test_extra_settings_cannot_carry_api_keys_or_bypass_triton_values(chart: Any, helm: ModuleType) -> None:
    for key in (
        "api_keys",
        "api_key_file",
        "triton_url",
        "triton_resolve_interval",
        "routing_policy",
        "routing_prefix_chars",
        "routing_load_factor",
    ):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema({"gateway": {"extraSettings": {key: "sk-inline"}}})


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_pods_get_time_to_drain_streams(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    settings = _settings(r)
    deployment = _gateway_deployment(r)
    gateway = _container(deployment, "gateway")
    pause = int(gateway["lifecycle"]["preStop"]["exec"]["command"][1])
    drain = pause + float(settings["GATEWAY_SHUTDOWN_GRACE_PERIOD"])
    assert _pod(deployment)["terminationGracePeriodSeconds"] >= drain + 5
    if SCENARIOS[scenario].get("triton", {}).get("mode") == "sidecar":
        triton = _container(deployment, "triton")
        assert int(triton["lifecycle"]["preStop"]["exec"]["command"][1]) >= drain


def test_sidecar_grace_shorter_than_the_drain_fails_early(render: RenderFn, helm: ModuleType) -> None:
    with pytest.raises(helm.HelmRenderError, match="Triton outlives the gateway"):
        render(merge_values(SIDECAR, {"triton": {"terminationGracePeriodSeconds": 20}}))


def test_config_change_rolls_the_gateway_pods(render: RenderFn) -> None:
    def checksum(values: dict[str, Any]) -> str:
        return _gateway_deployment(render(values))["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum({}) == checksum({})
    assert checksum({}) != checksum({"gateway": {"logLevel": "debug"}})


# ---------------------------------------------------------------------------------------------
# where Triton is


@pytest.mark.parametrize(
    "scenario", ["defaults", "managed-existing-pvc", "managed-image", "managed-replicas", "ingress", "auth-values"]
)
def test_managed_triton_url_points_at_the_rendered_triton_service(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    service, port = _service_of_url(r, _settings(r)["GATEWAY_TRITON_URL"])
    several = r.one("Deployment", TRITON_NAME)["spec"]["replicas"] > 1
    assert service["metadata"]["name"] == (TRITON_HEADLESS if several else TRITON_NAME)
    grpc = _service_port(service, "grpc")
    assert port == grpc["port"]
    triton_deployment = r.one("Deployment", TRITON_NAME)
    pod_labels = triton_deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert not (r.one("Service", FULLNAME)["spec"]["selector"].items() <= pod_labels.items())
    triton = _container(triton_deployment, "triton")
    assert _named_port(triton, grpc["targetPort"]) == int(
        next(a for a in triton["args"] if a.startswith("--grpc-port=")).split("=")[1]
    )


@pytest.mark.parametrize(
    ("values", "port"),
    [
        ({}, 8002),
        ({"triton": {"ports": {"metrics": 9102}}}, 9102),
        (merge_values(TRITON_REPLICAS, {"triton": {"ports": {"metrics": 9102}}}), 9102),
        (merge_values(SIDECAR, {"triton": {"ports": {"metrics": 9102}}}), 9102),
    ],
    ids=["managed", "managed-port", "managed-replicas", "sidecar"],
)
def test_the_gateway_reads_engine_load_on_the_charts_triton_metrics_port(
    render: RenderFn, values: dict[str, Any], port: int
) -> None:
    r = render(values)
    assert _settings(r)["GATEWAY_TRITON_METRICS"] == str(port)
    tritons = [c for d in r.all("Deployment") for c in _pod(d)["containers"] if c["name"] == "triton"]
    assert tritons and all(f"--metrics-port={port}" in c["args"] for c in tritons)


def test_external_triton_metrics_port_is_the_gateways_default_or_extra_settings(render: RenderFn, chart: Any) -> None:
    assert "GATEWAY_TRITON_METRICS" not in _settings(render(EXTERNAL))
    for values in (EXTERNAL, {}):
        given = merge_values(values, {"gateway": {"extraSettings": {"triton_metrics": "off"}}})
        manifests = chart.render(given, name="llm", namespace=NAMESPACE, is_install=True)
        configmap = next(text for path, text in manifests.items() if path.endswith("/configmap.yaml"))
        assert configmap.count("GATEWAY_TRITON_METRICS:") == 1  # the setting given wins, once
        assert _settings(render(given))["GATEWAY_TRITON_METRICS"] == "off"


@pytest.mark.parametrize("scenario", ["defaults", "managed-existing-pvc", "managed-image"])
def test_managed_triton_serves_the_vllm_image_on_a_gpu_from_the_model_volume(
    rendered: dict[str, Rendered], scenario: str
) -> None:
    r = rendered[scenario]
    triton_deployment = r.one("Deployment", TRITON_NAME)
    triton = _container(triton_deployment, "triton")
    assert "vllm" in triton["image"] and triton["image"].startswith("nvcr.io/nvidia/tritonserver:")
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert triton["startupProbe"]["failureThreshold"] * triton["startupProbe"]["periodSeconds"] >= 600
    repository = next(a for a in triton["args"] if a.startswith("--model-repository=")).split("=", 1)[1]
    assert _settings(r)["GATEWAY_MODEL_REPOSITORY"] == repository
    triton_mount = next(m for m in triton["volumeMounts"] if m["name"] == "models")
    gateway_mount = next(
        m for m in _container(_gateway_deployment(r), "gateway")["volumeMounts"] if m["name"] == "models"
    )
    assert gateway_mount["readOnly"] is True
    assert gateway_mount["mountPath"] == triton_mount["mountPath"]
    assert gateway_mount.get("subPath") == triton_mount.get("subPath")
    assert repository.startswith(triton_mount["mountPath"] + "/")
    triton_volume = next(v for v in _pod(triton_deployment)["volumes"] if v["name"] == "models")
    gateway_volume = next(v for v in _pod(_gateway_deployment(r))["volumes"] if v["name"] == "models")
    if "persistentVolumeClaim" in triton_volume:
        claim = triton_volume["persistentVolumeClaim"]["claimName"]
        assert gateway_volume["persistentVolumeClaim"]["claimName"] == claim
    else:
        init = _pod(triton_deployment)["initContainers"][0]
        assert init["image"] == "registry.example.com/models/llama-3.1-8b:v3"
        assert _pod(_gateway_deployment(r))["initContainers"][0]["image"] == init["image"]


def test_several_triton_replicas_are_routed_through_a_headless_service(rendered: dict[str, Rendered]) -> None:
    r = rendered["managed-replicas"]
    triton_deployment = r.one("Deployment", TRITON_NAME)
    assert triton_deployment["spec"]["replicas"] == 3
    headless = r.one("Service", TRITON_HEADLESS)
    spec = headless["spec"]
    assert spec["clusterIP"] == "None"  # one DNS record per pod, not a virtual IP
    assert spec["publishNotReadyAddresses"] is False  # a pod still loading its model gets no record
    assert _selects(spec["selector"], triton_deployment)
    assert not _selects(spec["selector"], _gateway_deployment(r))
    (grpc,) = spec["ports"]
    triton = _container(triton_deployment, "triton")
    grpc_arg = int(next(a for a in triton["args"] if a.startswith("--grpc-port=")).split("=")[1])
    assert grpc["name"] == "grpc" and grpc["port"] == grpc_arg
    assert _named_port(triton, grpc["targetPort"]) == grpc_arg
    url = f"dns:///{TRITON_HEADLESS}.{NAMESPACE}.svc.cluster.local:{grpc_arg}"
    assert _settings(r)["GATEWAY_TRITON_URL"] == url
    assert r.one("Service", TRITON_NAME)["spec"].get("clusterIP") != "None"  # kept for metrics, port-forwards
    assert TRITON_HEADLESS in r.notes and "x-gateway-replica" in r.notes


def test_several_triton_replicas_roll_and_drain_one_pod_at_a_time(rendered: dict[str, Rendered]) -> None:
    r = rendered["managed-replicas"]
    triton_deployment = r.one("Deployment", TRITON_NAME)
    # no surge pod (no spare GPU needed); the other replicas keep serving during a rollout
    assert triton_deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    budgets = r.all("PodDisruptionBudget")
    triton_budgets = [b for b in budgets if _selects(b["spec"]["selector"]["matchLabels"], triton_deployment)]
    gateway_budgets = [b for b in budgets if _selects(b["spec"]["selector"]["matchLabels"], _gateway_deployment(r))]
    # the eviction API refuses a pod that two budgets select
    assert len(triton_budgets) == len(gateway_budgets) == 1 and len(budgets) == 2
    assert triton_budgets[0]["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize("scenario", ["defaults", "managed-existing-pvc", "sidecar"])
def test_one_triton_keeps_the_cluster_ip_endpoint_and_recreates(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    assert not _settings(r)["GATEWAY_TRITON_URL"].startswith("dns:///")
    assert [s["metadata"]["name"] for s in r.all("Service") if s["spec"].get("clusterIP") == "None"] == []
    deployments = {d["metadata"]["name"]: d for d in r.all("Deployment")}
    triton_deployment = deployments.get(TRITON_NAME, deployments[FULLNAME])
    assert triton_deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert len(r.all("PodDisruptionBudget")) == 1  # the gateway's only


def test_triton_strategy_given_wins_over_the_derived_one(render: RenderFn) -> None:
    given = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    r = render({"triton": {"replicaCount": 2, "strategy": given}})
    assert r.one("Deployment", TRITON_NAME)["spec"]["strategy"] == given


def test_headless_service_name_fits_and_follows_the_cluster_domain(render: RenderFn) -> None:
    long_name = "x" * 63
    r = render({"fullnameOverride": long_name, "clusterDomain": "corp.internal", "triton": {"replicaCount": 2}})
    (headless,) = [s for s in r.all("Service") if s["spec"].get("clusterIP") == "None"]
    name = headless["metadata"]["name"]
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    url = r.one("ConfigMap", long_name)["data"]["GATEWAY_TRITON_URL"]
    assert url == f"dns:///{name}.{NAMESPACE}.svc.corp.internal:8001"


@pytest.mark.parametrize(
    "url",
    [
        "dns:///triton-headless.gpu-pool.svc.cluster.local:8001",
        "10.0.0.1:8001,10.0.0.2:8001",
        "triton-a.gpu:8001,dns:///triton-b.gpu.svc.cluster.local:8001,[fd00::1]:8001",
    ],
)
def test_external_replicas_are_passed_to_the_gateway_as_given(render: RenderFn, url: str) -> None:
    r = render(merge_values(EXTERNAL, {"triton": {"external": {"url": url}}}))
    assert _settings(r)["GATEWAY_TRITON_URL"] == url
    assert [s["metadata"]["name"] for s in r.all("Service")] == [FULLNAME]


def test_default_release_creates_a_kept_shared_model_claim(rendered: dict[str, Rendered]) -> None:
    r = rendered["defaults"]
    claim = r.one("PersistentVolumeClaim")
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert "ReadWriteMany" in claim["spec"]["accessModes"]
    assert r.maybe("PersistentVolumeClaim") is not None
    assert rendered["managed-existing-pvc"].maybe("PersistentVolumeClaim") is None


@pytest.mark.parametrize("scenario", ["external", "external-with-model-volume", "everything-external"])
def test_external_triton_url_is_used_as_given_and_no_triton_is_rendered(
    rendered: dict[str, Rendered], scenario: str
) -> None:
    r = rendered[scenario]
    assert _settings(r)["GATEWAY_TRITON_URL"] == EXTERNAL_URL
    assert [d["metadata"]["name"] for d in r.all("Deployment")] == [FULLNAME]
    assert [s["metadata"]["name"] for s in r.all("Service")] == [FULLNAME]
    assert r.maybe("PersistentVolumeClaim") is None
    assert [c["name"] for c in _pod(_gateway_deployment(r))["containers"]] == ["gateway"]


def test_external_triton_mounts_the_given_claim_read_only(rendered: dict[str, Rendered]) -> None:
    assert "GATEWAY_MODEL_REPOSITORY" not in _settings(rendered["external"])
    r = rendered["external-with-model-volume"]
    assert _settings(r)["GATEWAY_MODEL_REPOSITORY"] == "/models/repository"
    volume = next(v for v in _pod(_gateway_deployment(r))["volumes"] if v["name"] == "models")
    assert volume["persistentVolumeClaim"] == {"claimName": "models-ro", "readOnly": True}


@pytest.mark.parametrize("scenario", ["sidecar", "everything-sidecar"])
def test_sidecar_puts_triton_in_the_gateway_pod_on_localhost(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    assert [d["metadata"]["name"] for d in r.all("Deployment")] == [FULLNAME]
    deployment = _gateway_deployment(r)
    triton = _container(deployment, "triton")
    gateway = _container(deployment, "gateway")
    host, port = _settings(r)["GATEWAY_TRITON_URL"].rsplit(":", 1)
    assert host in ("127.0.0.1", "localhost")
    assert int(port) == _named_port(triton, "grpc")
    pod_ports = [p["containerPort"] for c in (triton, gateway) for p in c["ports"]]
    assert len(pod_ports) == len(set(pod_ports)), f"port clash inside the pod: {pod_ports}"
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert _pod(deployment)["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert {v["name"] for v in _pod(deployment)["volumes"]} >= {"models", "dshm", "tmp"}
    names = {p["name"] for p in r.one("Service", FULLNAME)["spec"]["ports"]}
    assert "grpc" not in names  # Triton stays private to its pod


def test_sidecar_port_clash_with_triton_fails_early(render: RenderFn, helm: ModuleType) -> None:
    with pytest.raises(helm.HelmRenderError, match="collides with triton.ports.http"):
        render(merge_values(SIDECAR, {"triton": {"ports": {"http": 8000}}}))


# ---------------------------------------------------------------------------------------------
# API keys


def test_api_keys_from_values_live_only_in_the_secret(rendered: dict[str, Rendered]) -> None:
    r = rendered["auth-values"]
    secret = r.one("Secret", API_KEY_SECRET)
    assert base64.b64decode(secret["data"]["api-keys"]).decode().splitlines() == API_KEYS
    for obj in r.objects:
        if obj is not secret:
            text = yaml.safe_dump(obj)
            assert not any(key in text for key in API_KEYS), f"an API key leaks into {obj['kind']}"
    assert not any(key in r.notes for key in API_KEYS)
    _assert_keys_mounted(r, secret["metadata"]["name"], "api-keys")


def test_existing_secret_is_referenced_not_created(rendered: dict[str, Rendered]) -> None:
    for scenario in ("auth-existing-secret", "everything-external"):
        r = rendered[scenario]
        assert API_KEY_SECRET not in _secret_names(r)
        _assert_keys_mounted(r, "gateway-api-keys", "keys.txt")
        assert "gateway-api-keys" in r.notes


def test_auth_off_mounts_no_keys(rendered: dict[str, Rendered]) -> None:
    r = rendered["defaults"]
    assert _secret_names(r) == [REASONING_SECRET]
    assert "GATEWAY_API_KEY_FILE" not in _settings(r)
    assert all("secret" not in v for v in _pod(_gateway_deployment(r))["volumes"])


def _assert_keys_mounted(r: Rendered, secret_name: str, key: str) -> None:
    pod = _pod(_gateway_deployment(r))
    volume = next(v for v in pod["volumes"] if v["name"] == "api-keys")
    assert volume["secret"]["secretName"] == secret_name
    assert volume["secret"]["items"] == [{"key": key, "path": key}]
    gateway = _container(_gateway_deployment(r), "gateway")
    mount = next(m for m in gateway["volumeMounts"] if m["name"] == "api-keys")
    assert mount["readOnly"] is True
    assert _settings(r)["GATEWAY_API_KEY_FILE"] == f"{mount['mountPath']}/{key}"
    assert all(  # the keys stay a file: no variable reads them from their Secret
        e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") != secret_name for e in gateway.get("env", [])
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"auth": {"enabled": True}}, "auth.enabled needs"),
        ({"auth": {"enabled": True, "apiKeys": ["a"], "existingSecret": "s"}}, "not both"),
        ({"auth": {"enabled": True, "apiKeys": ["has space"]}}, "no whitespace"),
        ({"triton": {"mode": "external"}}, "needs triton.external.url"),
        ({"triton": {"mode": "external", "external": {"url": "grpc://triton:8001"}}}, "must be host:port"),
        ({"triton": {"mode": "external", "external": {"url": "dns://triton:8001"}}}, "must be host:port"),
        ({"triton": {"mode": "external", "external": {"url": "a:8001,,b:8001"}}}, "must be host:port"),
        (merge_values(EXTERNAL, {"triton": {"replicaCount": 2}}), "in external mode the chart runs none"),
        (merge_values(SIDECAR, {"triton": {"replicaCount": 2}}), "in sidecar mode each gateway pod carries one Triton"),
        ({"triton": {"modelRepository": {"source": "image"}}}, "needs triton.modelRepository.image.repository"),
        ({"triton": {"modelRepository": {"path": "/elsewhere"}}}, "must lie inside"),
        ({"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}, "must not exceed"),
        ({"httpRoute": {"enabled": True}}, "needs httpRoute.parentRefs"),
        (
            {"gateway": {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}}},
            "needs gateway.metrics.enabled",
        ),
        ({"responsesStore": {"url": "postgresql://gateway:s3cret@pg:5432/gw"}}, "carries a password"),
        ({"responsesStore": {"url": "postgresql://pg/gw?sslmode=require&password=s3cret"}}, "carries a password"),
        ({"responsesStore": {"url": "postgresql://pg/gw", "existingSecret": "s"}}, "not both"),
        ({"responsesStore": {"url": "sqlite:////data/responses.db"}}, "must name a file under"),
        ({"responsesStore": {"url": "sqlite:///responses.db"}}, "must name a file under"),
        ({"responsesStore": {"url": f"sqlite:///{STORE_MOUNT}/../../tmp/r.db"}}, "must name a file under"),
    ],
)
def test_impossible_combinations_fail_at_render_with_a_clear_message(
    render: RenderFn, helm: ModuleType, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render(values)


# ---------------------------------------------------------------------------------------------
# the reasoning secret


def _reasoning_variable(r: Rendered) -> dict[str, Any]:
    env = _container(_gateway_deployment(r), "gateway")["env"]
    (variable,) = [e for e in env if e["name"] == "GATEWAY_REASONING_SECRET"]
    return dict(variable)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_pod_reads_one_reasoning_secret_from_a_secret(rendered: dict[str, Rendered], scenario: str) -> None:
    """A sealed blob from one pod must open on any: the variable comes from one Secret (the
    chart's unless one is named), never from the ConfigMap."""
    r = rendered[scenario]
    existing = SCENARIOS[scenario].get("gateway", {}).get("reasoningSecret", {}).get("existingSecret")
    name, key = (existing, REASONING_EXISTING_KEY) if existing else (REASONING_SECRET, "reasoning-secret")
    assert _reasoning_variable(r) == {
        "name": "GATEWAY_REASONING_SECRET",
        "valueFrom": {"secretKeyRef": {"name": name, "key": key}},
    }
    assert "GATEWAY_REASONING_SECRET" not in _settings(r)
    assert (REASONING_SECRET in _secret_names(r)) is not bool(existing)


def test_the_chart_draws_a_random_reasoning_secret_and_keeps_it_on_upgrade(render: RenderFn) -> None:
    secret = render({}).one("Secret", REASONING_SECRET)
    value = base64.b64decode(secret["data"]["reasoning-secret"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{48}", value), value
    other = base64.b64decode(render({}).one("Secret", REASONING_SECRET)["data"]["reasoning-secret"]).decode()
    assert other != value, "drawn per install, not written in the chart"
    # On an upgrade the one in the cluster is kept: the template looks its own Secret up (the
    # offline engine's lookup finds nothing, so this is read from the template).
    template = (CHART_DIR / "templates" / "reasoning-secret.yaml").read_text()
    assert 'lookup "v1" "Secret" .Release.Namespace $name' in template
    assert "index .data $key" in template


def test_an_existing_reasoning_secret_is_referenced_not_created(rendered: dict[str, Rendered]) -> None:
    r = rendered["reasoning-existing-secret"]
    assert REASONING_SECRET not in _secret_names(r) and r.all("Secret") == []
    assert _reasoning_variable(r)["valueFrom"] == {"secretKeyRef": {"name": "gw-reasoning", "key": "secrets"}}


@pytest.mark.parametrize(
    "bad",
    [
        {"gateway": {"extraSettings": {"reasoning_secret": "in-the-configmap"}}},
        {"gateway": {"reasoningSecret": {"key": "has space"}}},
        {"gateway": {"reasoningSecret": {"secret": "inline"}}},
    ],
)
def test_the_reasoning_secret_never_goes_through_values(chart: Any, helm: ModuleType, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(bad)


# ---------------------------------------------------------------------------------------------
# the responses store


def _dockerfile_lines() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments left out."""
    text = (CHART_DIR.parents[2] / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _dockerfile_env(name: str) -> str:
    """A variable the Dockerfile's ENV sets (the image's default)."""
    found = [m for line in _dockerfile_lines() if line.startswith("ENV ") for m in re.findall(rf"\b{name}=(\S+)", line)]
    assert len(found) == 1, f"{name} is set {len(found)} times in the Dockerfile"
    return found[0]


def _store_volume(r: Rendered) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(volume, mount) named responses-store in the gateway pod, each None when absent."""
    deployment = _gateway_deployment(r)
    volumes = [v for v in _pod(deployment)["volumes"] if v["name"] == "responses-store"]
    mounts = [m for m in _container(deployment, "gateway")["volumeMounts"] if m["name"] == "responses-store"]
    assert len(volumes) == len(mounts) <= 1
    return (volumes[0], mounts[0]) if volumes else (None, None)


def _store_path(r: Rendered) -> Path:
    """The SQLite file the gateway would open, parsed as the gateway parses its settings."""
    from gateway.config import ENV_PREFIX, Settings
    from gateway.store.location import SqliteLocation, parse_store_url

    settings = _settings(r)
    parsed = Settings(
        responses_store_enabled=settings[f"{ENV_PREFIX}RESPONSES_STORE_ENABLED"],
        responses_store=settings[f"{ENV_PREFIX}RESPONSES_STORE"],
    )
    assert parsed.responses_store_enabled is True
    location = parse_store_url(parsed.responses_store)
    assert isinstance(location, SqliteLocation)
    return location.path


@pytest.mark.parametrize("scenario", ["defaults", "sidecar", "store-pvc", "store-existing-claim"])
def test_sqlite_store_file_lies_on_the_writable_state_volume(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    path = _store_path(r)
    volume, mount = _store_volume(r)
    assert volume is not None and mount is not None
    assert path.is_absolute() and path.parent == Path(mount["mountPath"]) == Path(STORE_MOUNT)
    assert not mount.get("readOnly")
    assert _pod(_gateway_deployment(r))["securityContext"]["fsGroup"] == 10001  # the volume is the user's
    assert _container(_gateway_deployment(r), "gateway")["securityContext"]["readOnlyRootFilesystem"] is True


def test_default_store_is_sqlite_on_an_emptydir_where_the_image_puts_it(rendered: dict[str, Rendered]) -> None:
    r = rendered["defaults"]
    assert _settings(r)["GATEWAY_RESPONSES_STORE_ENABLED"] == "true"
    assert _settings(r)["GATEWAY_RESPONSES_STORE"] == _dockerfile_env("GATEWAY_RESPONSES_STORE")
    volumes = [json.loads(line.split(None, 1)[1]) for line in _dockerfile_lines() if line.startswith("VOLUME ")]
    assert volumes == [[STORE_MOUNT]]
    volume, _ = _store_volume(r)
    assert volume == {"name": "responses-store", "emptyDir": {"sizeLimit": "1Gi"}}
    assert [c["metadata"]["name"] for c in r.all("PersistentVolumeClaim")] == [f"{FULLNAME}-models"]
    assert "emptyDir" in r.notes and "lost when the pod is" in r.notes


def test_store_on_a_claim_keeps_the_file_and_one_pod_at_a_time(rendered: dict[str, Rendered]) -> None:
    r = rendered["store-pvc"]
    claim = r.one("PersistentVolumeClaim", f"{FULLNAME}-responses")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    volume, _ = _store_volume(r)
    assert volume["persistentVolumeClaim"] == {"claimName": f"{FULLNAME}-responses"}
    # a surge pod would wait for the volume on another node, or share the file across nodes
    assert _gateway_deployment(r)["spec"]["strategy"] == {"type": "Recreate"}
    assert _gateway_deployment(rendered["defaults"])["spec"]["strategy"]["type"] == "RollingUpdate"
    existing = rendered["store-existing-claim"]
    assert existing.maybe("PersistentVolumeClaim") is None
    volume, _ = _store_volume(existing)
    assert volume["persistentVolumeClaim"] == {"claimName": "gateway-state"}
    assert _gateway_deployment(existing)["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("scenario", ["autoscaled", "three-replicas", "everything-external"])
def test_store_url_from_a_secret_reaches_the_pod_env_only(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    settings = _settings(r)
    assert settings["GATEWAY_RESPONSES_STORE_ENABLED"] == "true"
    assert "GATEWAY_RESPONSES_STORE" not in settings  # the variable from env wins; none to confuse
    gateway = _container(_gateway_deployment(r), "gateway")
    (variable,) = [e for e in gateway["env"] if e["name"] == "GATEWAY_RESPONSES_STORE"]
    assert variable == {
        "name": "GATEWAY_RESPONSES_STORE",
        "valueFrom": {"secretKeyRef": {"name": "gateway-store", "key": "postgres-url"}},
    }
    assert _store_volume(r) == (None, None)  # nothing written in the pod
    assert "gateway-store" not in _secret_names(r)
    assert "Secret gateway-store" in r.notes


def test_store_bounds_reach_the_gateway_as_it_parses_them(rendered: dict[str, Rendered]) -> None:
    from gateway.config import Settings

    settings = _settings(rendered["autoscaled"])
    assert settings["GATEWAY_RESPONSES_STORE_TTL"] == "86400"
    assert settings["GATEWAY_RESPONSES_STORE_MAX"] == "50000"
    parsed = Settings(
        responses_store_ttl=settings["GATEWAY_RESPONSES_STORE_TTL"],
        responses_store_max=settings["GATEWAY_RESPONSES_STORE_MAX"],
    )
    assert parsed.responses_store_ttl == 86400.0 and parsed.responses_store_max == 50000


def test_batch_settings_reach_the_gateway_as_it_parses_them(rendered: dict[str, Rendered]) -> None:
    from gateway.config import Settings

    settings = _settings(rendered["autoscaled"])
    names = ("batch_runner", "batch_concurrency", "batch_max_concurrency", "batch_max_file_bytes", "jobs_retention")
    parsed = Settings(**{name: settings[f"GATEWAY_{name.upper()}"] for name in names})
    assert parsed.batch_runner is True and parsed.batch_concurrency == 32 and parsed.batch_max_concurrency == 4
    assert parsed.batch_max_file_bytes == 104857600 and parsed.jobs_retention == 604800.0
    assert _settings(rendered["defaults"])["GATEWAY_BATCH_RUNNER"] == "true"


def test_passwordless_postgres_url_may_sit_in_the_configmap_for_several_pods(rendered: dict[str, Rendered]) -> None:
    r = rendered["store-postgres-url"]
    assert _settings(r)["GATEWAY_RESPONSES_STORE"] == "postgresql://gateway@pg.db.svc:5432/gateway?sslmode=require"
    assert _gateway_deployment(r)["spec"]["replicas"] == 2
    assert _store_volume(r) == (None, None)
    env = _container(_gateway_deployment(r), "gateway")["env"]
    assert [e["name"] for e in env] == ["GATEWAY_REASONING_SECRET", "PGPASSWORD"]


def test_disabled_store_mounts_nothing_and_allows_several_pods(rendered: dict[str, Rendered]) -> None:
    r = rendered["three-replicas-no-store"]
    settings = _settings(r)
    assert settings["GATEWAY_RESPONSES_STORE_ENABLED"] == "false"
    assert "GATEWAY_RESPONSES_STORE" not in settings
    assert _store_volume(r) == (None, None)
    env = _container(_gateway_deployment(r), "gateway")["env"]
    assert [e["name"] for e in env] == ["GATEWAY_REASONING_SECRET"]
    assert "Stored responses" not in r.notes


@pytest.mark.parametrize(
    "values",
    [
        {"gateway": {"replicaCount": 2}},
        {"autoscaling": {"enabled": True}},
        {"autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 3}},
        {"gateway": {"replicaCount": 2}, "responsesStore": {"persistence": {"enabled": True}}},
        {
            "gateway": {"replicaCount": 4},
            "responsesStore": {
                "url": f"sqlite:///{STORE_MOUNT}/shared.db",
                "persistence": {"enabled": True, "accessModes": ["ReadWriteMany"]},
            },
        },
        merge_values(SIDECAR, {"gateway": {"replicaCount": 2}}),
    ],
    ids=["replicas", "autoscaling", "autoscaling-from-one", "pvc", "rwx-pvc", "sidecar"],
)
def test_several_pods_on_a_sqlite_store_are_refused_at_render(
    render: RenderFn, helm: ModuleType, values: dict[str, Any]
) -> None:
    with pytest.raises(helm.HelmRenderError, match="cannot share a SQLite responses store") as failure:
        render(values)
    message = str(failure.value)
    assert "previous_response_id" in message
    assert "responsesStore.existingSecret" in message and "responsesStore.enabled=false" in message


def test_one_pod_under_an_hpa_capped_at_one_is_not_several(render: RenderFn) -> None:
    r = render({"autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 1}})
    assert r.one("HorizontalPodAutoscaler")["spec"]["maxReplicas"] == 1
    assert _store_volume(r)[0] is not None


def test_store_settings_cannot_bypass_responses_store_values(chart: Any, helm: ModuleType) -> None:
    for key in ("responses_store", "responses_store_enabled", "responses_store_ttl", "responses_store_max"):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema({"gateway": {"extraSettings": {key: "x"}}})
    for url in ("mysql://db/gw", "file:///var/lib/x.db", "/var/lib/x.db"):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema({"responsesStore": {"url": url}})


# ---------------------------------------------------------------------------------------------
# scaling and disruption


def test_hpa_owns_replicas_when_on_and_the_deployment_when_off(rendered: dict[str, Rendered]) -> None:
    on = rendered["autoscaled"]
    hpa = on.one("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": FULLNAME}
    assert "replicas" not in _gateway_deployment(on)["spec"]
    off = rendered["three-replicas"]
    assert off.maybe("HorizontalPodAutoscaler") is None
    assert _gateway_deployment(off)["spec"]["replicas"] == 3
    single = rendered["defaults"]  # one pod: the default SQLite store allows no more
    assert single.maybe("HorizontalPodAutoscaler") is None
    assert _gateway_deployment(single)["spec"]["replicas"] == 1


@pytest.mark.parametrize("scenario", ["defaults", "sidecar", "three-replicas", "autoscaled"])
def test_pdb_selects_the_gateway_pods(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    pdb = r.one("PodDisruptionBudget")
    labels = _gateway_deployment(r)["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] >= 1  # a single replica must not block node drains


# ---------------------------------------------------------------------------------------------
# streaming through ingress / Gateway API, metrics


@pytest.mark.parametrize("scenario", ["ingress", "everything-external", "everything-sidecar"])
def test_ingress_turns_buffering_off_and_keeps_long_streams(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    ingress = r.one("Ingress")
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert annotations["nginx.ingress.kubernetes.io/proxy-request-buffering"] == "off"
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 600
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-send-timeout"]) >= 600
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    service = r.one("Service", backend["name"])
    assert _service_port(service, backend["port"]["name"])
    assert "https://llm.example.com/v1" in r.notes


def test_ingress_user_annotations_win_over_streaming_defaults(render: RenderFn) -> None:
    r = render(
        merge_values(
            INGRESS,
            {
                "ingress": {
                    "annotations": {"nginx.ingress.kubernetes.io/proxy-read-timeout": "7200", "example.com/team": "llm"}
                }
            },
        )
    )
    annotations = r.one("Ingress")["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "7200"
    assert annotations["example.com/team"] == "llm"
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    plain = render(merge_values(INGRESS, {"ingress": {"streaming": False}})).one("Ingress")
    assert "annotations" not in plain["metadata"]


@pytest.mark.parametrize("scenario", ["httproute", "everything-external"])
def test_httproute_is_well_formed_and_never_cuts_a_stream(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    route = r.one("HTTPRoute")
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["metadata"]["name"] == FULLNAME
    spec = route["spec"]
    assert spec["parentRefs"] == [{"name": "public", "namespace": "gateway-system"}]
    assert spec["hostnames"] == ["llm.example.com"]
    (rule,) = spec["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert rule["timeouts"]["request"] == "0s"
    (backend,) = rule["backendRefs"]
    service = r.one("Service", backend["name"])
    assert backend["port"] in [p["port"] for p in service["spec"]["ports"]]
    assert set(route) == {"apiVersion", "kind", "metadata", "spec"}


@pytest.mark.parametrize("scenario", ["managed-image", "managed-replicas", "sidecar"])
def test_service_monitors_scrape_declared_ports(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    monitors = r.all("ServiceMonitor")
    assert monitors
    services = r.all("Service")
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "prom"
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        selected = [
            s for s in services if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert len(selected) == 1, monitor["metadata"]["name"]
        ports = {p["name"] for p in selected[0]["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
            assert re.fullmatch(r"\d+[smh]", endpoint["interval"])
    gateway_monitor = r.one("ServiceMonitor", FULLNAME)
    assert gateway_monitor["spec"]["endpoints"][0]["port"] == "http"
    assert rendered["defaults"].maybe("ServiceMonitor") is None


# ---------------------------------------------------------------------------------------------
# NOTES


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_notes_print_a_curl_for_this_release(rendered: dict[str, Rendered], scenario: str) -> None:
    r = rendered[scenario]
    notes = r.notes
    assert "curl -N $OPENAI_BASE_URL/chat/completions" in notes
    assert '"stream\\": true' in notes
    assert f"-n {NAMESPACE}" in notes
    if not (SCENARIOS[scenario].get("ingress") or SCENARIOS[scenario].get("httpRoute")):
        port = r.one("Service", FULLNAME)["spec"]["ports"][0]["port"]
        assert f"port-forward service/{FULLNAME} {port}:{port}" in notes
    if SCENARIOS[scenario].get("auth"):
        assert "get secret" in notes and "base64 -d" in notes
