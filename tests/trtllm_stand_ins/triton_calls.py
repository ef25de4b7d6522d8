"""BLS calls from a stand-in to another model, and stopping a running decoupled call.

Triton 2.51's Python backend cannot cancel a BLS response iterator (that arrived in later
releases), so a caller whose own request was cancelled stops the generating model the way the
TensorRT-LLM models allow: a second request with ``stop=true`` and the running call's request id
(contract §2.6). Each call gets a unique request id for that. Only the ``triton_*.py`` modules use
this (it needs ``triton_python_backend_utils``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]
from numpy.typing import NDArray


class CallError(RuntimeError):
    """The called model answered with an error; the text is its message."""


def _tensors(inputs: Mapping[str, NDArray[Any]]) -> list[object]:
    return [pb_utils.Tensor(name, array) for name, array in inputs.items()]


def _outputs(response: object) -> dict[str, NDArray[Any]]:
    if response.has_error():  # type: ignore[attr-defined]
        raise CallError(response.error().message())  # type: ignore[attr-defined]
    return {tensor.name(): tensor.as_numpy() for tensor in response.output_tensors()}  # type: ignore[attr-defined]


def call(model: str, inputs: Mapping[str, NDArray[Any]], outputs: Sequence[str]) -> dict[str, NDArray[Any]]:
    """One request, one response (a model that is not decoupled)."""
    request = pb_utils.InferenceRequest(model_name=model, inputs=_tensors(inputs), requested_output_names=list(outputs))
    return _outputs(request.exec())


class StreamingCall:
    """A request to a decoupled model; iterate for its data responses (empty ones skipped)."""

    def __init__(self, model: str, inputs: Mapping[str, NDArray[Any]], outputs: Sequence[str]) -> None:
        self.model = model
        self.request_id = f"stand-in-{uuid.uuid4().hex}"
        self._inputs = dict(inputs)
        self._outputs = list(outputs)
        self.stopped = False

    def __iter__(self) -> Iterator[dict[str, NDArray[Any]]]:
        request = pb_utils.InferenceRequest(
            model_name=self.model,
            inputs=_tensors(self._inputs),
            requested_output_names=self._outputs,
            request_id=self.request_id,
        )
        for response in request.exec(decoupled=True):
            tensors = _outputs(response)
            if tensors:
                yield tensors

    def stop(self) -> None:
        """Ask the model to stop this call (once); the call then ends with an empty FINAL."""
        if self.stopped:
            return
        self.stopped = True
        stop_inputs = {
            "input_lengths": np.array([[1]], dtype=np.int32),
            "request_output_len": np.array([[1]], dtype=np.int32),
            "stop": np.array([[True]]),
        }
        request = pb_utils.InferenceRequest(
            model_name=self.model, inputs=_tensors(stop_inputs), requested_output_names=[], request_id=self.request_id
        )
        for response in request.exec(decoupled=True):
            _outputs(response)
