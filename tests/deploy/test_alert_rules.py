"""The chart's alert rules: a PrometheusRule (``gateway.metrics.prometheusRule``) and the same rules
as a plain rules file (``deploy/prometheus/triton-openai-gateway.rules.yaml``), proven by promtool.

promtool is Prometheus's own checker (Debian package ``prometheus``): ``promtool check rules``
parses every expression and annotation template as Prometheus will, and ``promtool test rules``
replays the series of ``alert_rules_test.yaml`` and asserts that each alert fires, with its
labels and annotations, where it should and not where it should not. A missing promtool fails
these tests with the install line; it never skips them.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.deploy.values import merge_values

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
SCRIPT = REPO_ROOT / "scripts" / "render-alert-rules.py"
RULES_FILE = REPO_ROOT / "deploy" / "prometheus" / "triton-openai-gateway.rules.yaml"
PROMTOOL_TESTS = HERE / "alert_rules_test.yaml"
OPERATIONS = REPO_ROOT / "docs" / "OPERATIONS.md"
FULLNAME = "llm-triton-openai-gateway"
NAMESPACE = "inference"  # conftest's render fixture
SELECTOR = f'job="{FULLNAME}", namespace="{NAMESPACE}"'
Rendered = Any  # conftest.Rendered
RenderFn = Callable[[dict[str, Any]], Rendered]

ALERTS = {
    "GatewayDown": "gatewayDown",
    "GatewayAbsent": "gatewayAbsent",
    "GatewayNotReady": "gatewayNotReady",
    "ReplicaOutOfPool": "replicaOutOfPool",
    "StreamsLost": "streamsLost",
    "QueueFull": "queueFull",
    "RequestsShed": "requestsShed",
    "HighErrorRatio": "highErrorRatio",
    "HighTimeToFirstToken": "highTimeToFirstToken",
    "EngineKVCacheSaturated": "engineKVCacheSaturated",
    "KeyThrottled": "keyThrottled",
    "KeyLimitsStoreFailing": "keyLimitsStoreFailing",
}
"""Every alert the chart defines, by its key under prometheusRule.alerts."""


def _rule_values(**prometheus_rule: Any) -> dict[str, Any]:
    return {
        "gateway": {
            "metrics": {
                "serviceMonitor": {"enabled": True},
                "prometheusRule": merge_values({"enabled": True}, prometheus_rule),
            }
        }
    }


ON = _rule_values()
FAST = _rule_values(
    rateWindow="1m",
    alerts={key: {"for": "0s"} for key in ALERTS.values()},
)
"""Every alert at once (for: 0s) over a 1 m rate window: what an integration test against a real
Prometheus that scrapes every few seconds renders, so alerts fire within a minute."""


@pytest.fixture(scope="session")
def promtool() -> str:
    found = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if found is None:  # pragma: no cover - the message is the point
        pytest.fail(
            "promtool is needed for the alert rule tests: apt-get install -y prometheus (Debian/Ubuntu; "
            "it installs /usr/bin/promtool)",
            pytrace=False,
        )
    return found


def _run(promtool: str, *args: str, cwd: Path | None = None) -> str:
    done = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"promtool {' '.join(args)} failed:\n{output}"
    return output


def _rule(r: Rendered) -> dict[str, Any]:
    rule: dict[str, Any] = r.one("PrometheusRule", FULLNAME)
    return rule


def _rules(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in spec["groups"] for rule in group["rules"] if "alert" in rule}


def _write_rules(spec: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_alert_rules", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# ---------------------------------------------------------------------------------------------
# the object


def test_prometheus_rule_is_off_by_default(render: RenderFn) -> None:
    assert render({}).maybe("PrometheusRule") is None


def test_prometheus_rule_has_its_shape_labels_and_namespace(render: RenderFn) -> None:
    rule = _rule(render(_rule_values(labels={"release": "kube-prometheus-stack"})))
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["kind"] == "PrometheusRule"
    metadata = rule["metadata"]
    assert metadata["namespace"] == NAMESPACE
    assert metadata["labels"]["release"] == "kube-prometheus-stack"  # the ruleSelector's label
    assert metadata["labels"]["app.kubernetes.io/instance"] == "llm"
    assert metadata["labels"]["app.kubernetes.io/part-of"] == "triton-openai-gateway"
    assert [g["name"] for g in rule["spec"]["groups"]] == [
        "triton-openai-gateway.availability",
        "triton-openai-gateway.traffic",
        "triton-openai-gateway.keys",
    ]
    assert set(_rules(rule["spec"])) == set(ALERTS)


def test_every_alert_has_severity_summary_description_and_runbook(render: RenderFn) -> None:
    for name, rule in _rules(_rule(render(ON))["spec"]).items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        for text in (annotations["summary"], annotations["description"]):
            assert "$labels." in text, f"{name}: {text}"
            assert "\n" not in text and "  " not in text, f"{name}: the folded text was not restored: {text!r}"
        assert annotations["runbook_url"] == f"docs/OPERATIONS.md#{name.lower()}"


def test_every_runbook_anchor_is_a_heading_of_the_alerts_section(render: RenderFn) -> None:
    text = OPERATIONS.read_text()
    section = text.split("\n## Alerts (PrometheusRule)\n", 1)[1].split("\n## ", 1)[0]
    anchors = {_anchor(line[4:]) for line in section.splitlines() if line.startswith("### ")}
    for name, rule in _rules(_rule(render(ON))["spec"]).items():
        assert rule["annotations"]["runbook_url"].split("#", 1)[1] in anchors, name


def test_annotations_name_only_labels_their_expression_keeps(render: RenderFn) -> None:
    """An aggregation keeps only its ``by`` labels (absent() only its equality matchers): a
    ``$labels.x`` it drops would render empty at 3 a.m."""
    for name, rule in _rules(_rule(render(ON))["spec"]).items():
        expr = rule["expr"]
        kept: set[str] | None = None
        if expr.startswith("absent("):
            kept = set(re.findall(r'(\w+)="', expr))
        elif " by (" in expr:
            kept = {label.strip() for by in re.findall(r" by \(([^)]*)\)", expr) for label in by.split(",")}
        used = set(re.findall(r"\$labels\.(\w+)", " ".join(rule["annotations"].values())))
        if kept is not None:
            assert used <= kept, f"{name}: {sorted(used - kept)} are not in the result of {expr}"


def test_every_expression_selects_the_release(render: RenderFn) -> None:
    for name, rule in _rules(_rule(render(ON))["spec"]).items():
        expr = rule["expr"]
        selectors = re.findall(r"\{[^}]*\}", expr)
        assert selectors, name
        assert all(s.startswith("{" + SELECTOR) for s in selectors), f"{name}: {expr}"
    down = _rules(_rule(render(ON))["spec"])["GatewayDown"]["expr"]
    assert 'endpoint!="triton-metrics"' in down  # Triton's endpoint shares the job in sidecar mode


def test_selector_value_replaces_the_job_everywhere(render: RenderFn) -> None:
    rules = _rules(_rule(render(_rule_values(selector='job="llm-gateway", cluster="eu-1"')))["spec"])
    for name, rule in rules.items():
        assert FULLNAME not in rule["expr"], name
        assert all(s.startswith('{job="llm-gateway", cluster="eu-1"') for s in re.findall(r"\{[^}]*\}", rule["expr"]))


def test_chart_refuses_alerts_it_could_not_scope(render: RenderFn, helm: ModuleType) -> None:
    no_monitor = {"gateway": {"metrics": {"prometheusRule": {"enabled": True}}}}
    with pytest.raises(helm.HelmRenderError, match="selector"):
        render(no_monitor)
    own_job = merge_values(no_monitor, {"gateway": {"metrics": {"prometheusRule": {"selector": 'job="gw"'}}}})
    assert 'job="gw"' in _rules(_rule(render(own_job))["spec"])["GatewayDown"]["expr"]
    with pytest.raises(helm.HelmRenderError, match="needs gateway.metrics.enabled"):
        render(merge_values(own_job, {"gateway": {"metrics": {"enabled": False}}}))


# ---------------------------------------------------------------------------------------------
# promtool


def test_promtool_check_rules_passes_on_the_rendered_spec(render: RenderFn, promtool: str, tmp_path: Path) -> None:
    path = _write_rules(_rule(render(ON))["spec"], tmp_path / "rules.yaml")
    assert f"SUCCESS: {len(ALERTS)} rules found" in _run(promtool, "check", "rules", str(path))


def test_promtool_unit_tests_pass(render: RenderFn, promtool: str, tmp_path: Path) -> None:
    """The rules the chart renders by default, against alert_rules_test.yaml (rule_files: rules.yaml)."""
    _write_rules(_rule(render(ON))["spec"], tmp_path / "rules.yaml")
    shutil.copy(PROMTOOL_TESTS, tmp_path / PROMTOOL_TESTS.name)
    assert "SUCCESS" in _run(promtool, "test", "rules", PROMTOOL_TESTS.name, cwd=tmp_path)


def test_promtool_tests_cover_every_alert_firing_and_quiet(render: RenderFn) -> None:
    tests = yaml.safe_load(PROMTOOL_TESTS.read_text())
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in (c for t in tests["tests"] for c in t.get("alert_rule_test", [])):
        (firing if case["exp_alerts"] else quiet).add(case["alertname"])
        for alert in case["exp_alerts"]:
            assert alert["exp_annotations"], case["alertname"]  # annotations asserted, not only labels
    names = set(_rules(_rule(render(ON))["spec"]))
    assert names <= firing, f"never shown firing: {sorted(names - firing)}"
    assert names <= quiet, f"never shown quiet: {sorted(names - quiet)}"


# ---------------------------------------------------------------------------------------------
# values


def test_non_default_values_reach_the_rules(render: RenderFn, promtool: str, tmp_path: Path) -> None:
    values = _rule_values(
        rateWindow="10m",
        runbookBaseUrl="https://git.example.com/gw/blob/v1/docs/OPERATIONS.md",
        alertLabels={"team": "ml-platform"},
        alerts={
            "gatewayDown": {"for": "30s", "severity": "page"},
            "queueFull": {"ratio": 0.75, "for": "15s"},
            "requestsShed": {"threshold": 2.5, "ignoredReasons": []},
            "highErrorRatio": {"threshold": 0.02, "minRequestRate": 0.5, "perModel": False},
            "highTimeToFirstToken": {"quantile": 0.99, "threshold": 2},
            "keyThrottled": {"threshold": 0.5, "for": "1h"},
            "keyLimitsStoreFailing": {"threshold": 0},
            "streamsLost": {"threshold": 0.05, "for": "5m"},
            "engineKVCacheSaturated": {"ratio": 0.8, "for": "30m", "severity": "critical"},
        },
    )
    spec = _rule(render(values))["spec"]
    rules = _rules(spec)
    assert rules["GatewayDown"]["for"] == "30s" and rules["GatewayDown"]["labels"]["severity"] == "page"
    assert all(r["labels"]["team"] == "ml-platform" for r in rules.values())
    assert rules["GatewayNotReady"]["annotations"]["runbook_url"] == (
        "https://git.example.com/gw/blob/v1/docs/OPERATIONS.md#gatewaynotready"
    )
    assert rules["QueueFull"]["expr"].endswith(">= 0.75") and rules["QueueFull"]["for"] == "15s"
    shed = rules["RequestsShed"]["expr"]
    assert shed.endswith("> 2.5") and "reason!~" not in shed and "[10m]" in shed
    ratio = rules["HighErrorRatio"]["expr"]
    assert ratio.endswith("> 0.02") and "> 0.5)" in ratio
    assert "by (namespace, job)" in ratio and "model" not in ratio  # one ratio over all models
    assert "$labels.model" not in " ".join(rules["HighErrorRatio"]["annotations"].values())
    ttft = rules["HighTimeToFirstToken"]
    assert ttft["expr"].startswith("histogram_quantile(0.99,") and ttft["expr"].endswith("> 2")
    assert "p99" in ttft["annotations"]["summary"] and "over 2s" in ttft["annotations"]["description"]
    assert rules["KeyThrottled"]["expr"].endswith("> 0.5") and rules["KeyThrottled"]["for"] == "1h"
    assert rules["KeyLimitsStoreFailing"]["expr"].endswith("[10m]) > 0")
    lost = rules["StreamsLost"]
    assert lost["expr"].endswith("> 0.05") and "[10m]" in lost["expr"] and lost["for"] == "5m"
    kv = rules["EngineKVCacheSaturated"]
    assert kv["expr"].endswith(">= 0.8") and kv["for"] == "30m" and kv["labels"]["severity"] == "critical"
    _run(promtool, "check", "rules", str(_write_rules(spec, tmp_path / "rules.yaml")))


def test_default_shed_rule_ignores_sheddable_refusals(render: RenderFn) -> None:
    assert 'reason!~"sheddable"' in _rules(_rule(render(ON))["spec"])["RequestsShed"]["expr"]
    both = _rule_values(alerts={"requestsShed": {"ignoredReasons": ["sheddable", "displaced"]}})
    assert 'reason!~"sheddable|displaced"' in _rules(_rule(render(both))["spec"])["RequestsShed"]["expr"]


def test_stream_rule_counts_only_streams_that_did_not_go_on(render: RenderFn) -> None:
    expr = _rules(_rule(render(ON))["spec"])["StreamsLost"]["expr"]
    assert 'outcome=~"failed|not_continuable"' in expr and expr.endswith("> 0")  # default: any lost stream


def test_kv_cache_rule_takes_one_figure_per_engine(render: RenderFn) -> None:
    """Every gateway pod reads the same engine: the most any read, per replica and model, not a
    sum that would count one engine once per pod."""
    expr = _rules(_rule(render(ON))["spec"])["EngineKVCacheSaturated"]["expr"]
    assert expr.startswith("max by (namespace, job, replica, model) (") and expr.endswith(">= 0.95")


def test_zero_thresholds_reach_the_rules(render: RenderFn) -> None:
    """0 is a threshold, not an unset value (Helm's ``default`` would replace it)."""
    zero = _rule_values(
        alerts={
            "streamsLost": {"threshold": 0},
            "engineKVCacheSaturated": {"ratio": 0},
            "requestsShed": {"threshold": 0},
            "keyLimitsStoreFailing": {"threshold": 0},
        }
    )
    rules = _rules(_rule(render(zero))["spec"])
    assert rules["StreamsLost"]["expr"].endswith("> 0")
    assert rules["EngineKVCacheSaturated"]["expr"].endswith(">= 0")
    assert rules["RequestsShed"]["expr"].endswith("> 0")
    assert rules["KeyLimitsStoreFailing"]["expr"].endswith("> 0")


def test_alerts_can_be_disabled_one_by_one_and_all(render: RenderFn) -> None:
    rules = _rules(_rule(render(_rule_values(alerts={"gatewayAbsent": {"enabled": False}})))["spec"])
    assert set(rules) == set(ALERTS) - {"GatewayAbsent"}
    keys_off = _rule_values(alerts={"keyThrottled": {"enabled": False}, "keyLimitsStoreFailing": {"enabled": False}})
    groups = [g["name"] for g in _rule(render(keys_off))["spec"]["groups"]]
    assert "triton-openai-gateway.keys" not in groups  # no empty group
    all_off = _rule_values(alerts={key: {"enabled": False} for key in ALERTS.values()})
    assert _rule(render(all_off))["spec"] == {"groups": []}


def test_extra_groups_are_appended(render: RenderFn, promtool: str, tmp_path: Path) -> None:
    extra = {
        "name": "my-gateway-slo",
        "rules": [{"record": "gw:requests:rate5m", "expr": "sum(rate(gateway_requests_total[5m]))"}],
    }
    spec = _rule(render(_rule_values(extraGroups=[extra])))["spec"]
    assert spec["groups"][-1] == extra and len(spec["groups"]) == 4
    all_off = _rule_values(extraGroups=[extra], alerts={key: {"enabled": False} for key in ALERTS.values()})
    assert _rule(render(all_off))["spec"] == {"groups": [extra]}
    _run(promtool, "check", "rules", str(_write_rules(spec, tmp_path / "rules.yaml")))


def test_fast_values_render_rules_that_fire_at_once(render: RenderFn, promtool: str, tmp_path: Path) -> None:
    """FAST: the values an integration test against a real Prometheus uses, through the chart or
    through the script's ``rules_body`` (a plain rules file for the test's own scrape job)."""
    rules = _rules(_rule(render(FAST))["spec"])
    assert {r["for"] for r in rules.values()} == {"0s"}
    assert all("[1m]" in r["expr"] for r in rules.values() if "rate(" in r["expr"])
    fast = FAST["gateway"]["metrics"]["prometheusRule"]
    body = _load_script().rules_body({**fast, "selector": 'job="gateway"'})
    plain = _rules(yaml.safe_load(body))
    assert {r["for"] for r in plain.values()} == {"0s"}
    assert all('{job="gateway"' in r["expr"] for r in plain.values())
    path = tmp_path / "rules.yaml"
    path.write_text(body)
    _run(promtool, "check", "rules", str(path))


@pytest.mark.parametrize(
    "bad",
    [
        {"rateWindow": "0m"},
        {"rateWindow": "5 minutes"},
        {"alerts": {"gatewayDown": {"for": "soon"}}},
        {"alerts": {"queueFull": {"ratio": 1.5}}},
        {"alerts": {"highTimeToFirstToken": {"quantile": 95}}},
        {"alerts": {"requestsShed": {"ignoredReasons": ["busy"]}}},
        {"alerts": {"keyThrottled": {"threshold": -1}}},
        {"alerts": {"streamsLost": {"threshold": -0.1}}},
        {"alerts": {"engineKVCacheSaturated": {"ratio": 1.2}}},
        {"alerts": {"engineKVCacheSaturated": {"threshold": 0.9}}},
        {"alerts": {"gatewayDown": {"page": True}}},
        {"alertLabels": {"severity": "page"}},
    ],
)
def test_schema_refuses_values_the_rules_cannot_use(chart: Any, helm: ModuleType, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(_rule_values(**bad))


# ---------------------------------------------------------------------------------------------
# the plain rules file


def test_committed_rules_file_is_what_the_chart_renders(chart: Any) -> None:
    assert RULES_FILE.read_text() == _load_script().render_rules(chart), (
        f"{RULES_FILE.relative_to(REPO_ROOT)} differs from the chart: run .venv/bin/python scripts/render-alert-rules.py"
    )


def test_rules_file_is_the_chart_rule_with_the_fixed_job(render: RenderFn, promtool: str) -> None:
    plain = yaml.safe_load(RULES_FILE.read_text())
    rendered = _rule(render(_rule_values(selector='job="triton-openai-gateway"')))["spec"]
    assert plain == rendered
    for name, rule in _rules(plain).items():
        assert "namespace=" not in rule["expr"], name
        assert all(s.startswith('{job="triton-openai-gateway"') for s in re.findall(r"\{[^}]*\}", rule["expr"]))
    assert f"SUCCESS: {len(ALERTS)} rules found" in _run(promtool, "check", "rules", str(RULES_FILE))
