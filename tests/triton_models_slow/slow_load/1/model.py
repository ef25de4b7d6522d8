"""Sleeps in ``initialize`` so Triton stays in its loading phase; see config.pbtxt."""

import time

import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

LOAD_SECONDS = 60.0


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        time.sleep(LOAD_SECONDS)

    def execute(self, requests: list) -> list:  # type: ignore[type-arg]
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT", pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy())]
            )
            for r in requests
        ]
