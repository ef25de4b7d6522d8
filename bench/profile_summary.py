"""Summarise a py-spy ``--format raw`` profile (collapsed stacks: ``frame;frame;... count``).

Prints/returns: self time by layer (first path component: gateway, grpc, starlette, asyncio, ...),
the top self-time frames, and the inclusive share of every frame in the gateway's own code.

    .venv/bin/python bench/profile_summary.py bench/results/profile-c64.txt
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _file(frame: str) -> str:
    match = _FRAME.match(frame)
    return match["file"] if match else ""


def _layer(frame: str) -> str:
    path = _file(frame)
    if not path:
        return "<native/unknown>"
    if path.startswith("<"):
        return "<frozen/builtin>"
    parts = path.replace("\\", "/").split("/")
    if "site-packages" in parts:
        parts = parts[parts.index("site-packages") + 1 :]
    head = parts[0]
    return head[:-3] if head.endswith(".py") else head


def summarize(text: str, top: int = 15) -> dict[str, Any]:
    total = 0
    self_counts: Counter[str] = Counter()
    layer_counts: Counter[str] = Counter()
    gateway_inclusive: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        # py-spy puts the thread name first ("thread (0x...)" / "process ..."); drop non-code frames.
        code = [f for f in frames if _FRAME.match(f) and ".py" in _file(f) or _file(f).startswith("<")]
        if not code:
            continue
        total += count
        leaf = code[-1]
        self_counts[leaf] += count
        layer_counts[_layer(leaf)] += count
        for frame in set(code):
            if _layer(frame) == "gateway":
                gateway_inclusive[frame] += count

    def rows(counter: Counter[str], key: str) -> list[dict[str, Any]]:
        return [{key: name, "samples": n, "share": n / total if total else 0.0} for name, n in counter.most_common(top)]

    return {
        "samples": total,
        "layers": rows(layer_counts, "layer"),
        "self": rows(self_counts, "frame"),
        "gateway_inclusive": rows(gateway_inclusive, "frame"),
    }


def main() -> int:
    summary = summarize(Path(sys.argv[1]).read_text(), top=int(sys.argv[2]) if len(sys.argv) > 2 else 25)
    print(f"{summary['samples']} samples")
    for section in ("layers", "self", "gateway_inclusive"):
        print(f"\n== {section}")
        for row in summary[section]:
            name = row.get("layer") or row.get("frame")
            print(f"{row['share'] * 100:6.1f} %  {name}")
    if "--json" in sys.argv:
        print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
