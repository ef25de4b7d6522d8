"""Triton entry of the `llmapi` stand-in (the LLM-API model).

Thin on purpose: it puts the repository root (the ``stand_in_python_path`` parameter) on
``sys.path`` and delegates to ``tests/trtllm_stand_ins/triton_llmapi.py``, where the logic lives
beside the plain modules the unit tests import without Triton.
"""

from __future__ import annotations

import json
import sys
from typing import Any


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        parameters = json.loads(args["model_config"]).get("parameters", {})
        root = parameters.get("stand_in_python_path", {}).get("string_value", "")
        if not root or "${" in root:
            raise ValueError(
                "stand_in_python_path is not filled in: start the stack with tests/integration/trtllm_stack.py"
            )
        if root not in sys.path:
            sys.path.insert(0, root)
        from tests.trtllm_stand_ins.triton_llmapi import LlmApiModel

        self._model = LlmApiModel(args)

    def execute(self, requests: list[Any]) -> Any:
        return self._model.execute(requests)

    def finalize(self) -> None:
        self._model.finalize()
