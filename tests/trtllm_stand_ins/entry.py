"""The ``model.py`` of every Python-backend stand-in: ``fill_repository`` puts a copy of this file
in each one's version directory.

Thin on purpose: it puts the repository root (the ``stand_in_python_path`` parameter) on
``sys.path`` and hands the model to the class its ``stand_in_entry`` parameter names
(``<module of tests/trtllm_stand_ins>:<class>``), where the logic lives beside the plain modules
the unit tests import without Triton.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        parameters = json.loads(args["model_config"]).get("parameters", {})
        root = parameters.get("stand_in_python_path", {}).get("string_value", "")
        entry = parameters.get("stand_in_entry", {}).get("string_value", "")
        if not root or "${" in root or ":" not in entry:
            raise ValueError(
                "stand_in_python_path or stand_in_entry is not filled in: start the stack with "
                "tests/integration/trtllm_stack.py"
            )
        if root not in sys.path:
            sys.path.insert(0, root)
        module, name = entry.split(":", 1)
        self._model = getattr(importlib.import_module(f"tests.trtllm_stand_ins.{module}"), name)(args)

    def execute(self, requests: list[Any]) -> Any:
        return self._model.execute(requests)

    def finalize(self) -> None:
        self._model.finalize()
