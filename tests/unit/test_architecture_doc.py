"""docs/ARCHITECTURE.md states the layer contracts that ``lint-imports`` checks; it must state the
ones in pyproject.toml, in their order, or a reader trusts rules nothing enforces."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["importlinter"]["contracts"])


def stated(item: str) -> list[str]:
    """The backticked names of the doc's numbered rule that starts with ``item``."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    rule = re.search(rf"^{re.escape(item)}(.*?)(?=^\d\. |^$)", text, re.M | re.S)
    assert rule, f"docs/ARCHITECTURE.md has no rule {item!r}"
    return re.findall(r"`([a-z_]+)`", rule.group(1))


def names(layer: str) -> list[str]:
    return [part.strip().removeprefix("gateway.") for part in layer.split("|")]


def test_the_layers_are_stated_in_their_order() -> None:
    top_level, backend = (c for c in contracts() if c["type"] == "layers")
    assert stated("1. ") == [n for layer in top_level["layers"] for n in names(layer)]  # type: ignore[attr-defined]
    assert stated("2. ") == [n for layer in backend["layers"] for n in names(layer)]  # type: ignore[attr-defined]


def test_the_leaves_are_stated() -> None:
    leaves = next(c for c in contracts() if str(c["name"]).startswith("Leaves"))
    assert stated("3. ")[: len(leaves["source_modules"])] == names("|".join(leaves["source_modules"]))  # type: ignore[arg-type]
