"""Fixtures for the deployment tests: a real Helm engine and offline Kubernetes schemas.

The Helm engine is Helm v4's Go SDK, embedded in the PyPI package ``helm-python-sdk`` (import
name ``helm_python``), which the ``test`` extra installs: ``helm lint`` and ``helm template``
run in-process, offline, with no ``helm`` binary. Manifests are validated with
``kubernetes-validate`` against its bundled schemas. A missing engine fails the tests with the
install command; it never skips them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "deploy" / "helm" / "triton-openai-gateway"
RELEASE = "llm"
NAMESPACE = "inference"


def _require(module: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - the message is the point
        pytest.fail(
            f"{package} is needed for the chart tests and is part of the test extra: "
            f"pip install -e '.[test]' (or pip install {package}). Import error: {exc}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def helm() -> ModuleType:
    """The embedded Helm SDK (``helm_python``)."""
    return _require("helm_python", "helm-python-sdk")


@pytest.fixture(scope="session")
def kubernetes_validate() -> ModuleType:
    return _require("kubernetes_validate", "kubernetes-validate")


@dataclass(frozen=True)
class Rendered:
    """One release rendered like ``helm template``: objects by (kind, name), plus NOTES."""

    objects: list[dict[str, Any]]
    notes: str

    def kinds(self) -> list[str]:
        return sorted(o["kind"] for o in self.objects)

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.all(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}: {self.kinds()}"
        return found[0]

    def maybe(self, kind: str) -> dict[str, Any] | None:
        found = self.all(kind)
        assert len(found) <= 1
        return found[0] if found else None


@pytest.fixture(scope="session")
def chart(helm: ModuleType) -> Any:
    loaded = helm.Chart.load(str(CHART_DIR))
    yield loaded
    loaded.close()


@pytest.fixture(scope="session")
def render(helm: ModuleType, chart: Any) -> Callable[[dict[str, Any]], Rendered]:
    """Render like ``helm install --dry-run``: schema check of the values, then templates."""

    def _render(values: dict[str, Any]) -> Rendered:
        chart.validate_schema(values)
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        objects: list[dict[str, Any]] = []
        notes = ""
        for path, text in sorted(manifests.items()):
            if path.endswith("NOTES.txt"):
                notes = text
                continue
            for doc in yaml.safe_load_all(text):
                if doc:
                    objects.append(doc)
        return Rendered(objects=objects, notes=notes)

    return _render
