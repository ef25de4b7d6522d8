"""Make the reference model's helper modules importable (they live beside model.py, not in a package).

The engine fixture loads the committed tiny-llm weights once per session (about 2-4 s).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_VERSION_DIR = REPO_ROOT / "triton_models" / "reference" / "tiny-llm" / "1"
if str(MODEL_VERSION_DIR) not in sys.path:
    sys.path.insert(0, str(MODEL_VERSION_DIR))


@pytest.fixture(scope="session")
def engine() -> Iterator[object]:
    from engine import TinyLlmEngine
    from model_config import load_model_config

    yield TinyLlmEngine(load_model_config(MODEL_VERSION_DIR))
