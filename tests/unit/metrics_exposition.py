"""The metrics tests' view of an exposition (every sample by name and labels), and one gateway
worker process, as ``--workers`` runs them: a script run with prometheus-client's multiprocess
directory set before it imports anything, so its series go to the shared files a scrape of any
worker adds up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]
Found = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(text: str) -> Found:
    """Every sample of an exposition, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def run_worker(directory: Path, script: str, argument: Any = None) -> str:
    """``script`` in a process of its own with ``argument`` as JSON in ``sys.argv[1]``; its stdout
    (a scrape's text, where the script prints one)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script, json.dumps(argument)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
