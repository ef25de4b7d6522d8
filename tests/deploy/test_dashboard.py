"""The Grafana dashboard: one JSON file in the chart (deploy/grafana/ links to it for import by
hand), shipped as a ConfigMap for Grafana's dashboard sidecar.

Without a Grafana or a Prometheus, these tests check what a dashboard gets wrong silently: panel
ids and places, datasources, the template variables, and queries that name a metric or a label the
gateway or Triton does not export (a regex matcher on a label the series lacks matches everything
at "All" and nothing once a value is picked). The metric names and labels come from
gateway/metrics.py's declarations, read with ``ast``, so a renamed metric fails here. Whether each
query returns series is tests/integration/test_prometheus.py's: a real Prometheus scraping a
real gateway and Triton.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "deploy" / "helm" / "triton-openai-gateway"
DASHBOARD_FILE = CHART_DIR / "dashboards" / "triton-openai-gateway.json"
IMPORT_FILE = REPO_ROOT / "deploy" / "grafana" / "triton-openai-gateway.json"
METRICS_SOURCE = REPO_ROOT / "gateway" / "metrics.py"
FULLNAME = "llm-triton-openai-gateway"
NAMESPACE = "inference"  # conftest's render namespace
KUBE_VERSIONS = ("1.25.0", "1.37.0")
Rendered = Any  # conftest.Rendered
RenderFn = Callable[[dict[str, Any]], Rendered]

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
FILTERS = ("model", "key", "pod")
"""The query variables; a series with one of these labels is filtered by ``label=~"$label"``."""
ALLOWED_VARIABLES = {"model", "key", "pod", "__rate_interval"}
TARGET_LABELS = {"pod", "namespace", "job", "instance", "service", "endpoint", "container"}
"""Labels Prometheus (the chart's ServiceMonitor) puts on every series it scrapes."""
TRITON_METRICS: dict[str, set[str]] = {
    **{
        name: {"model", "version"}
        for name in (
            "nv_inference_request_success",
            "nv_inference_count",
            "nv_inference_exec_count",
            "nv_inference_request_duration_us",
            "nv_inference_queue_duration_us",
            "nv_inference_compute_infer_duration_us",
            "nv_inference_pending_request_count",
        )
    },
    "nv_inference_request_failure": {"model", "version", "reason"},
    "nv_cpu_utilization": set(),
    "nv_cpu_memory_used_bytes": set(),
    "nv_gpu_utilization": {"gpu_uuid"},
    "nv_gpu_memory_used_bytes": {"gpu_uuid"},
}
"""What Triton's metrics port serves, as far as the dashboard reads it (nv_gpu_* on GPU machines)."""

ROWS = ["Overview", "Errors", "Latency", "Throughput", "Queue & scheduling", "API keys", "Replicas", "Triton"]
REQUIRED_METRICS = {
    "Overview": ["gateway_requests_total", "gateway_ready", "gateway_requests_running", "gateway_requests_waiting"],
    "Errors": ["gateway_requests_total", "gateway_backend_errors_total", "gateway_cancellations_total"],
    "Latency": [
        "gateway_time_to_first_token_seconds_bucket",
        "gateway_inter_token_latency_seconds_bucket",
        "gateway_request_duration_seconds_bucket",
    ],
    "Throughput": ["gateway_prompt_tokens_total", "gateway_completion_tokens_total"],
    "Queue & scheduling": [
        "gateway_requests_waiting",
        "gateway_requests_waiting_limit",
        "gateway_requests_running",
        "gateway_requests_running_limit",
        "gateway_queue_wait_seconds_bucket",
        "gateway_requests_shed_total",
    ],
    "API keys": [
        "gateway_key_requests_total",
        "gateway_key_prompt_tokens_total",
        "gateway_key_completion_tokens_total",
        "gateway_key_rate_limited_total",
        "gateway_key_limits_failures_total",
    ],
    "Replicas": [
        "gateway_replica_up",
        "gateway_replica_in_flight",
        "gateway_replica_routed_total",
        "gateway_replica_retries_total",
        "gateway_replica_ejections_total",
        "gateway_stream_migrations_total",
        "gateway_stream_migration_seconds_bucket",
        "gateway_replica_engine_requests",
        "gateway_replica_kv_cache_usage",
        "gateway_replica_metrics_up",
    ],
    "Triton": [
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_pending_request_count",
        "nv_cpu_utilization",
        "nv_cpu_memory_used_bytes",
        "nv_gpu_utilization",
        "nv_gpu_memory_used_bytes",
    ],
}
"""Per row, the series an operator must find in it."""


# ---------------------------------------------------------------------------------------------
# what the gateway exports, from gateway/metrics.py


def _exposed(kind: str, name: str, labels: set[str]) -> dict[str, set[str]]:
    """The series names Prometheus sees for one declaration, with their labels."""
    if kind == "Counter":
        return {name.removesuffix("_total") + "_total": labels}
    if kind == "Histogram":
        return {f"{name}_bucket": labels | {"le"}, f"{name}_sum": labels, f"{name}_count": labels}
    return {name: labels}


def _gateway_metrics() -> dict[str, set[str]]:
    """Every ``Counter``/``Gauge``/``Histogram``/``GaugeMetricFamily`` call in metrics.py, its name
    and labels resolved through module constants and the tables a loop declares from (``_LIVE``)."""
    tree = ast.parse(METRICS_SOURCE.read_text())
    constants = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    loop_vars: dict[str, tuple[str, int]] = {}  # `for name, doc, label, shows in _LIVE`: name -> (_LIVE, 0)
    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.comprehension) and isinstance(node.target, ast.Tuple):
            if isinstance(node.iter, ast.Name) and isinstance(constants.get(node.iter.id), ast.Tuple):
                for i, elt in enumerate(node.target.elts):
                    if isinstance(elt, ast.Name):
                        assert loop_vars.setdefault(elt.id, (node.iter.id, i)) == (node.iter.id, i), elt.id
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
            continue
        kind = node.func.id
        if kind not in ("Counter", "Gauge", "Histogram", "GaugeMetricFamily"):
            continue
        labels_node = node.args[2] if len(node.args) > 2 else None
        for keyword in node.keywords:
            if keyword.arg in ("labels", "labelnames"):
                labels_node = keyword.value
        for env in _bindings(node, loop_vars, constants):
            name = _literal(node.args[0], env, constants)
            labels = _literal(labels_node, env, constants) if labels_node is not None else []
            assert isinstance(name, str) and isinstance(labels, list), ast.dump(node)
            found.update(_exposed(kind, name, set(labels)))
    return found


def _bindings(
    call: ast.Call, loop_vars: dict[str, tuple[str, int]], constants: dict[str, ast.expr]
) -> Iterator[dict[str, ast.expr]]:
    """One environment per row of the table the call's loop variables come from (one, empty, if none)."""
    used = {n.id for n in ast.walk(call) if isinstance(n, ast.Name) and n.id in loop_vars}
    tables = {loop_vars[name][0] for name in used}
    assert len(tables) <= 1, f"line {call.lineno}: names from several tables"
    if not tables:
        yield {}
        return
    table = constants[tables.pop()]
    assert isinstance(table, ast.Tuple)
    for row in table.elts:
        assert isinstance(row, ast.Tuple)
        yield {name: row.elts[loop_vars[name][1]] for name in used}


def _literal(node: ast.expr, env: dict[str, ast.expr], constants: dict[str, ast.expr]) -> Any:
    if isinstance(node, ast.Name):
        resolved = env.get(node.id, constants.get(node.id))
        assert resolved is not None, f"line {node.lineno}: cannot resolve {node.id}"
        return _literal(resolved, env, constants)
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(elt, env, constants) for elt in node.elts]
    return ast.literal_eval(node)


EXPORTED: dict[str, set[str]] = {**_gateway_metrics(), **TRITON_METRICS}


# ---------------------------------------------------------------------------------------------
# PromQL, as far as names and labels go


_TOKEN = re.compile(
    r'=~|!~|!=|"(?:[^"\\]|\\.)*"|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[a-zA-Z_:][a-zA-Z0-9_:]*|\$\{?\w+\}?|\S'
)
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right"}
_AGGREGATIONS = {"sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile"}
"""Followed by ``by (...)`` rather than ``(`` in ``sum by (le) (...)``: not metric names."""
_MATCHER_OPS = {"=", "!=", "=~", "!~"}


@dataclass
class Query:
    """The selectors of a PromQL expression (metric name, label -> (op, value)) and the labels its
    ``by``/``on``/... clauses name."""

    selectors: list[tuple[str, dict[str, tuple[str, str]]]] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)

    @property
    def metrics(self) -> set[str]:
        return {name for name, _ in self.selectors}


def parse(expr: str) -> Query:
    tokens = [m.group() for m in _TOKEN.finditer(expr)]
    query, i = Query(), 0
    while i < len(tokens):
        token, following = tokens[i], tokens[i + 1] if i + 1 < len(tokens) else ""
        if token == "[":  # a range: [$__rate_interval]
            i = tokens.index("]", i) + 1
        elif token in _GROUPING and following == "(":
            end = tokens.index(")", i)
            query.grouping |= {t for t in tokens[i + 2 : end] if t != ","}
            i = end + 1
        elif token == "{" or (re.fullmatch(r"[a-zA-Z_:][\w:]*", token) and following == "{"):
            name = "" if token == "{" else token
            start = i + 1 if token == "{" else i + 2
            end = tokens.index("}", start)
            matchers = [t for t in tokens[start:end] if t != ","]
            assert len(matchers) % 3 == 0, f"cannot read the matchers of {expr!r}"
            labels = {}
            for label, op, value in zip(matchers[::3], matchers[1::3], matchers[2::3], strict=True):
                assert op in _MATCHER_OPS and value.startswith('"'), f"bad matcher {label}{op}{value} in {expr!r}"
                labels[label] = (op, value[1:-1])
            query.selectors.append((labels.pop("__name__", ("", name))[1] or name, labels))
            i = end + 1
        elif re.fullmatch(r"[a-zA-Z_:][\w:]*", token) and following != "(" and token not in _KEYWORDS | _AGGREGATIONS:
            query.selectors.append((token, {}))  # a bare metric name
            i += 1
        else:
            i += 1
    return query


def test_parse_reads_selectors_groupings_and_ignores_functions_numbers_and_strings() -> None:
    q = parse(
        'histogram_quantile(0.95, sum by (key, le) (rate(x_bucket{key=~"$key", pod!="a,b"}[$__rate_interval])))'
        ' / on (key) y * 1e6 or vector(0) + label_replace(z{a="1"}, "k", "(none)", "k", "")'
    )
    assert q.selectors == [
        ("x_bucket", {"key": ("=~", "$key"), "pod": ("!=", "a,b")}),
        ("y", {}),
        ("z", {"a": ("=", "1")}),
    ]
    assert q.grouping == {"key", "le"}


def test_the_gateway_metrics_are_read_from_their_declarations() -> None:
    # one of each way metrics.py declares a metric: a counter, a histogram, a table row, a constant
    assert EXPORTED["gateway_requests_total"] == {"model", "adapter", "endpoint", "stream", "status"}
    assert EXPORTED["gateway_queue_wait_seconds_bucket"] == {"model", "key", "band", "le"}
    assert EXPORTED["gateway_requests_waiting_limit"] == {"model"}
    assert EXPORTED["gateway_replica_engine_requests"] == {"replica", "model", "state"}
    assert EXPORTED["gateway_ready"] == set()


# ---------------------------------------------------------------------------------------------
# the dashboard itself


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text())
    return loaded


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a collapsed row holds its panels


def _graphs(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in _panels(dashboard["panels"]) if p["type"] != "row"]


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in _graphs(dashboard) for target in panel["targets"]]


def _by_row(dashboard: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Panels under each row, by the rows' order on the page."""
    rows: dict[str, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] = []
    for panel in sorted(dashboard["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])):
        if panel["type"] == "row":
            current = rows.setdefault(panel["title"], list(panel.get("panels", [])))
        else:
            current.append(panel)
    return rows


def test_import_file_is_a_relative_link_to_the_chart_file() -> None:
    assert IMPORT_FILE.is_symlink()
    assert not os.path.isabs(os.readlink(IMPORT_FILE))
    assert IMPORT_FILE.resolve() == DASHBOARD_FILE.resolve()
    assert not DASHBOARD_FILE.is_symlink()


def test_dashboard_identity(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "triton-openai-gateway"
    assert dashboard["title"] == "Triton OpenAI Gateway"
    assert 36 <= dashboard["schemaVersion"] <= 41  # Grafana 10 and 11
    assert DASHBOARD_FILE.read_text() == json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def test_panel_ids_unique_and_panels_tile_the_grid(dashboard: dict[str, Any]) -> None:
    panels = list(_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    taken: dict[tuple[int, int], str] = {}
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for cell in (
            (x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])
        ):
            assert cell not in taken, f"{panel['title']} overlaps {taken[cell]}"
            taken[cell] = panel["title"]


def test_every_panel_has_the_datasource_variable_a_description_a_unit_and_targets(dashboard: dict[str, Any]) -> None:
    for panel in _graphs(dashboard):
        title = panel["title"]
        assert panel["datasource"] == DATASOURCE, title
        assert len(panel["description"]) > 40, title
        assert panel["fieldConfig"]["defaults"]["unit"], title
        assert panel["targets"], title
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), title
        assert all(
            target["expr"].strip() and target.get("datasource", DATASOURCE) == DATASOURCE for target in panel["targets"]
        )


def test_variables(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in FILTERS:
        variable = variables[name]
        assert variable["type"] == "query", name
        assert variable["datasource"] == DATASOURCE, name
        assert variable["multi"] and variable["includeAll"] and variable["allValue"] == ".*", name
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
        assert match and match[2] == name, variable["query"]
        for metric, _ in parse(match[1]).selectors:
            for one in metric.split("|"):  # {__name__=~"a|b"}
                assert name in EXPORTED[one] | TARGET_LABELS, (one, name)


def test_exprs_use_only_the_dashboard_variables(dashboard: dict[str, Any]) -> None:
    for expr in _exprs(dashboard):
        assert set(re.findall(r"\$\{?(\w+)", expr)) <= ALLOWED_VARIABLES, expr
        assert "${" not in expr, expr  # the integration test substitutes $name


def test_every_metric_and_label_in_every_expr_is_exported(dashboard: dict[str, Any]) -> None:
    for expr in _exprs(dashboard):
        query = parse(expr)
        known: set[str] = set(TARGET_LABELS)
        for metric, matchers in query.selectors:
            assert metric in EXPORTED, f"{metric} is not exported (gateway/metrics.py, Triton): {expr}"
            labels = EXPORTED[metric] | TARGET_LABELS
            known |= labels
            assert set(matchers) <= labels, f"{metric} has no label {set(matchers) - labels}: {expr}"
        assert query.grouping <= known, f"grouping by {query.grouping - known}: {expr}"


def test_every_selector_filters_by_each_variable_its_series_carry(dashboard: dict[str, Any]) -> None:
    for expr in _exprs(dashboard):
        for metric, matchers in parse(expr).selectors:
            for label in FILTERS:
                if label in EXPORTED[metric] | TARGET_LABELS:
                    assert matchers.get(label) == ("=~", f"${label}"), f'{metric} without {label}=~"${label}": {expr}'


def test_quantiles_keep_the_bucket_label(dashboard: dict[str, Any]) -> None:
    for expr in _exprs(dashboard):
        query = parse(expr)
        if any(metric.endswith("_bucket") for metric in query.metrics):
            assert "histogram_quantile(" in expr, expr
            assert "le" in query.grouping, expr


def test_gpu_queries_read_only_gpu_metrics(dashboard: dict[str, Any]) -> None:
    """The integration test runs on a CPU machine and exempts a query whose metrics are all nv_gpu_*."""
    for expr in _exprs(dashboard):
        metrics = parse(expr).metrics
        if any(m.startswith("nv_gpu_") for m in metrics):
            assert all(m.startswith("nv_gpu_") for m in metrics), expr


def test_every_row_shows_its_topics(dashboard: dict[str, Any]) -> None:
    rows = _by_row(dashboard)
    assert list(rows) == ROWS
    for row, metrics in REQUIRED_METRICS.items():
        shown = {m for panel in rows[row] for target in panel["targets"] for m in parse(target["expr"]).metrics}
        assert set(metrics) <= shown, f"{row} lacks {set(metrics) - shown}"


@pytest.mark.parametrize(
    ("metric", "quantiles", "by"),
    [
        ("gateway_time_to_first_token_seconds_bucket", {"0.5", "0.9", "0.99"}, set()),
        ("gateway_inter_token_latency_seconds_bucket", {"0.5", "0.9", "0.99"}, set()),
        ("gateway_request_duration_seconds_bucket", {"0.5", "0.95", "0.99"}, {"endpoint"}),
        ("gateway_queue_wait_seconds_bucket", {"0.95"}, {"model"}),
        ("gateway_queue_wait_seconds_bucket", {"0.95"}, {"key"}),
        ("gateway_queue_wait_seconds_bucket", {"0.95"}, {"band"}),
        ("gateway_stream_migration_seconds_bucket", {"0.95"}, set()),
    ],
)
def test_latency_quantiles(dashboard: dict[str, Any], metric: str, quantiles: set[str], by: set[str]) -> None:
    found = {
        match[1]
        for expr in _exprs(dashboard)
        if metric in parse(expr).metrics and parse(expr).grouping == by | {"le"}
        for match in [re.match(r"(?:label_replace\()?histogram_quantile\(([\d.]+),", expr)]
        if match
    }
    assert quantiles <= found, f"{metric} by {by}: {found}"


# ---------------------------------------------------------------------------------------------
# the ConfigMap


def _dashboard_configmap(rendered: Rendered) -> dict[str, Any] | None:
    found = [o for o in rendered.all("ConfigMap") if o["metadata"]["name"] == f"{FULLNAME}-dashboard"]
    assert len(found) <= 1
    return found[0] if found else None


def test_no_dashboard_configmap_by_default(render: RenderFn) -> None:
    assert _dashboard_configmap(render({})) is None


@pytest.mark.parametrize(
    ("settings", "labels", "annotations", "namespace"),
    [
        ({}, {"grafana_dashboard": "1"}, None, NAMESPACE),
        (
            {"labels": {"grafana_dashboard": None, "dashboards": "llm"}, "annotations": {"grafana_folder": "LLM"}},
            {"dashboards": "llm"},
            {"grafana_folder": "LLM"},
            NAMESPACE,
        ),
        ({"namespace": "monitoring"}, {"grafana_dashboard": "1"}, None, "monitoring"),
    ],
    ids=["defaults", "labels-and-folder", "grafana-namespace"],
)
def test_dashboard_configmap(
    render: RenderFn,
    kubernetes_validate: ModuleType,
    settings: dict[str, Any],
    labels: dict[str, str],
    annotations: dict[str, str] | None,
    namespace: str,
) -> None:
    values = {"gateway": {"metrics": {"grafanaDashboard": {"enabled": True, **settings}}}}
    configmap = _dashboard_configmap(render(values))
    assert configmap is not None
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(configmap, version, strict=True)
    metadata = configmap["metadata"]
    assert metadata["namespace"] == namespace
    assert metadata["labels"]["app.kubernetes.io/instance"] == "llm"
    sidecar_labels = {k: v for k, v in metadata["labels"].items() if "/" not in k}
    assert sidecar_labels == labels
    assert metadata.get("annotations") == annotations
    assert list(configmap["data"]) == ["triton-openai-gateway.json"]
    text = configmap["data"]["triton-openai-gateway.json"]
    assert text == DASHBOARD_FILE.read_text()
    assert json.loads(text) == json.loads(DASHBOARD_FILE.read_text())


def test_chart_with_dashboard_lints_strictly(helm: ModuleType) -> None:
    values = {"gateway": {"metrics": {"grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "LLM"}}}}}
    report = helm.lint(str(CHART_DIR), values, strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], json.dumps(report, indent=2)


@pytest.mark.parametrize("bad", [{"namespace": "Monitoring"}, {"labels": {"x": 1}}, {"folder": "LLM"}])
def test_schema_refuses_bad_dashboard_settings(helm: ModuleType, chart: Any, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"gateway": {"metrics": {"grafanaDashboard": {"enabled": True, **bad}}}})
