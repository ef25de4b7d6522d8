"""The reference model's modules the stand-ins reuse, made importable.

tiny-llm's helpers (``triton_models/reference/tiny-llm/1``) sit beside its ``model.py`` and import
one another by bare name, so their directory must be on ``sys.path``. The stand-ins reuse the
sampler (penalties, top-k/top-p and the seeded draw), the grammar compiler (llguidance), the
structured-output record and the KV-cache argument probe, so that tiny-llm and its TensorRT-LLM
stand-ins generate alike; what differs (end ids, stop words as tokens, LoRA from request tensors)
is the stand-ins' own.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_DIR = ROOT / "triton_models" / "reference" / "tiny-llm" / "1"
TINY_LLM_WEIGHTS = ROOT / "triton_models" / "weights" / "tiny-llm"


def use_reference_modules() -> None:
    """Put the reference model's directory on ``sys.path`` (once)."""
    if str(REFERENCE_DIR) not in sys.path:
        sys.path.insert(0, str(REFERENCE_DIR))
