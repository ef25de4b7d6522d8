"""Helm values for the chart tests, built from parts."""

from __future__ import annotations

import copy
from typing import Any


def merge_values(*parts: dict[str, Any]) -> dict[str, Any]:
    """Helm values deep-merged, later parts winning (as ``helm -f a -f b`` merges them)."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge_values(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out
