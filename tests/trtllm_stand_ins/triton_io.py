"""What every stand-in's Triton side shares: parameters, input tensors, response senders, metrics.

Only the ``triton_*.py`` modules import this (it needs ``triton_python_backend_utils``, which exists
inside the Python-backend stub only).

Both transaction modes answer through the request's response sender: a decoupled model sends any
number of responses and then FINAL; a model that is not decoupled must send exactly one response
carrying FINAL (the Python backend allows the sender there since 23.10), which lets
``tensorrt_llm`` and ``tensorrt_llm_nd`` run the same scheduler. Outputs the request did not ask
for are dropped before sending, as the C++ backend fills only the requested ones.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]
from numpy.typing import NDArray

logger = logging.getLogger(__name__)

CANCELLED_MESSAGE = "Request was cancelled"


class ParameterError(ValueError):
    """A model parameter is missing or still a ``${...}`` placeholder: the model fails to load."""


def model_config(args: dict[str, str]) -> dict[str, Any]:
    return dict(json.loads(args["model_config"]))


def model_parameters(config: dict[str, Any]) -> dict[str, str]:
    return {key: str(value.get("string_value", "")) for key, value in config.get("parameters", {}).items()}


def required_path(parameters: dict[str, str], name: str) -> Path:
    """An absolute path parameter, checked (the repository must be filled: trtllm_stack.fill_repository)."""
    value = parameters.get(name, "")
    if not value or "${" in value:
        raise ParameterError(
            f"model parameter '{name}' is {value!r}: fill the repository's placeholders first "
            "(tests/integration/trtllm_stack.py: fill_repository)"
        )
    path = Path(value)
    if not path.exists():
        raise ParameterError(f"model parameter '{name}' points at {path}, which does not exist")
    return path


def flag_parameter(parameters: dict[str, str], name: str, default: bool) -> bool:
    """A boolean parameter; no value or one that does not parse gives ``default`` (with a warning)."""
    value = parameters.get(name, "").strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    if value:
        logger.warning("model parameter %s=%r is not a boolean; using %s", name, value, default)
    return default


def declared_inputs(config: dict[str, Any]) -> list[str]:
    return [str(entry["name"]) for entry in config.get("input", [])]


def is_decoupled(config: dict[str, Any]) -> bool:
    return bool(pb_utils.using_decoupled_model_transaction_policy(config))


def read_inputs(request: Any, names: list[str]) -> dict[str, NDArray[Any]]:
    """Every declared input the request carries, as numpy (BYTES as object arrays of bytes)."""
    arrays = {}
    for name in names:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is not None:
            arrays[name] = tensor.as_numpy()
    return arrays


def requested_outputs(request: Any) -> frozenset[str]:
    return frozenset(request.requested_output_names())


def text_array(texts: list[str] | list[bytes], shape: tuple[int, ...]) -> NDArray[Any]:
    """A BYTES tensor of UTF-8 encoded strings."""
    encoded = [text.encode("utf-8") if isinstance(text, str) else text for text in texts]
    return np.array(encoded, dtype=object).reshape(shape)


class TritonSink:
    """A request's response sender, for either transaction mode."""

    def __init__(self, request: Any, decoupled: bool, requested: frozenset[str] | None = None) -> None:
        self._sender = request.get_response_sender()
        self._decoupled = decoupled
        self._requested = requested
        self._sent = False

    def is_cancelled(self) -> bool:
        return bool(self._sender.is_cancelled())

    def send(self, outputs: dict[str, NDArray[Any]], final: bool) -> None:
        tensors = [
            pb_utils.Tensor(name, array)
            for name, array in outputs.items()
            if self._requested is None or name in self._requested
        ]
        if not self._decoupled and not final:
            raise RuntimeError("a model that is not decoupled sends exactly one response")
        self._sent = True
        flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
        self._sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=flags)

    def send_error(self, message: str, code: str = "INTERNAL") -> None:
        error = pb_utils.TritonError(message, getattr(pb_utils.TritonError, code, pb_utils.TritonError.INTERNAL))
        self._sent = True
        self._sender.send(
            pb_utils.InferenceResponse(output_tensors=[], error=error),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )

    def close(self) -> None:
        """FINAL without data; a model that is not decoupled must still send one response."""
        if self._decoupled:
            self._sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        elif not self._sent:
            self.send_error(CANCELLED_MESSAGE, "CANCELLED")

    def send_empty_final(self) -> None:
        """The answer to a ``stop`` request: an empty response with FINAL, in either mode."""
        if self._decoupled:
            self._sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        else:
            self.send({}, final=True)


class TritonMetrics:
    """Two counters on Triton's metrics port, so tests can see that a cancel stopped the work:
    ``trtllm_stand_in_requests_cancelled_total`` and ``trtllm_stand_in_tokens_generated_total``
    (labelled by model). One lock: the scheduler thread and ``execute`` both count."""

    def __init__(self, model: str) -> None:
        self._lock = threading.Lock()
        self._families = [
            pb_utils.MetricFamily(
                name="trtllm_stand_in_requests_cancelled_total",
                description="Requests a TensorRT-LLM stand-in stopped because they were cancelled",
                kind=pb_utils.MetricFamily.COUNTER,
            ),
            pb_utils.MetricFamily(
                name="trtllm_stand_in_tokens_generated_total",
                description="Tokens a TensorRT-LLM stand-in generated (returned or not)",
                kind=pb_utils.MetricFamily.COUNTER,
            ),
        ]
        self._cancelled, self._tokens = (family.Metric(labels={"model": model}) for family in self._families)

    def request_cancelled(self) -> None:
        with self._lock:
            self._cancelled.increment(1.0)

    def tokens_generated(self, count: int) -> None:
        if count:
            with self._lock:
                self._tokens.increment(float(count))
