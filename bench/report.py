"""Medians, table cells and the report files every subcommand writes.

Reports go to ``bench/results/`` (ignored by git) as ``<subcommand>-<time>.md`` and ``.json``:
the Markdown is what a person reads, the JSON keeps every run's every figure. The one table
kept in the repository is docs/PERFORMANCE.md's, copied from a report by hand.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.stack import RESULTS, Variant, git_head, machine_info


def fmt(value: Any, digits: int = 1, sign: bool = False) -> str:
    """A table cell: ``–`` for nothing, thousands separated above 1,000."""
    if value is None:
        return "–"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:+,.0f}" if sign else f"{value:,.0f}"
        return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"
    return str(value)


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def ratio(a: Any, b: Any) -> float | None:
    x, y = number(a), number(b)
    return None if x is None or not y else x / y


def difference(a: Any, b: Any) -> float | None:
    x, y = number(a), number(b)
    return None if x is None or y is None else x - y


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs of one side as one: the median of each figure, errors summed."""
    merged: dict[str, Any] = dict(runs[0])
    for key in runs[0]:
        values = [v for v in (number(r.get(key)) for r in runs) if v is not None]
        if key in ("errors", "unfinished"):
            merged[key] = int(sum(values))
        elif values:  # a figure some run lacks (no TTFT in its window) is the others' median
            merged[key] = statistics.median(values)
    merged["error_samples"] = [s for r in runs for s in r.get("error_samples", [])][:5]
    return merged


class Report:
    """One subcommand's report: a header saying what ran where, sections of tables, the JSON."""

    def __init__(self, subcommand: str, variants: list[Variant]) -> None:
        self.subcommand = subcommand
        self.started = time.time()
        self.data: dict[str, Any] = {
            "command": shlex.join([".venv/bin/python", "-m", "bench", *sys.argv[1:]]),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine_info(),
            "variants": [
                {
                    "name": v.name,
                    "tree": str(v.root),
                    "env": dict(v.env),
                    "commit": git_head(v.root),
                    # Extension modules built in place are imported before their sources.
                    "extension_modules": len(list((v.root / "gateway").rglob("*.so"))),
                }
                for v in variants
            ],
        }
        self.lines: list[str] = []

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        def numeric(cell: str) -> bool:
            return cell.strip("+-–.,% ").replace(",", "").replace(".", "").isdigit() or cell == "–"

        align = ["---:" if all(numeric(row[i]) for row in rows) else "---" for i in range(len(header))]
        self.add("| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |")
        self.add(*("| " + " | ".join(row) + " |" for row in rows), "")

    def markdown(self) -> str:
        d, m = self.data, self.data["machine"]
        variants = ", ".join(
            f"`{v['name']}` = {v['tree']} at {v['commit']}"
            + "".join(f" {k}={val}" for k, val in v["env"].items())
            + (
                f" ({v['extension_modules']} compiled extension modules in its gateway/)"
                if v["extension_modules"]
                else ""
            )
            for v in d["variants"]
        )
        head = [
            f"# bench {self.subcommand}, {d['started']}",
            "",
            f"`{d['command']}`: {d.get('elapsed_s', 0):.0f} s. {m['cpu']}, {m['cores']} cores, Python {m['python']}; "
            f"load average {m['loadavg_at_start'][0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end.",
            "",
            f"Variants: {variants}.",
            "",
        ]
        return "\n".join(head + self.lines)

    def write(self) -> Path:
        """Write ``bench/results/<subcommand>-<time>.{md,json}``, print the Markdown, return its path."""
        self.data["elapsed_s"] = round(time.time() - self.started, 1)
        RESULTS.mkdir(parents=True, exist_ok=True)
        stem = RESULTS / f"{self.subcommand}-{time.strftime('%Y%m%d-%H%M%S')}"
        text = self.markdown()
        stem.with_suffix(".md").write_text(text)
        stem.with_suffix(".json").write_text(json.dumps(self.data, indent=1, default=str))
        print(text)
        print(f"Report: {stem}.md and .json", file=sys.stderr)
        return stem.with_suffix(".md")
