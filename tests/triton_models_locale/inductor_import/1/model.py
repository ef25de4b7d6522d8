"""Imports what Triton's vLLM backend imports through vLLM: torch's inductor, which reads its
UTF-8 kernel templates with ``open()`` and no ``encoding=`` while it is imported."""

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        import torch._inductor.compile_fx  # noqa: F401

    def execute(self, requests: list) -> list:  # type: ignore[type-arg]
        out = np.array([b"imported"], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("REPORT", out)]) for _ in requests]
