"""Test-only decoupled model: answers each request with its place in the order it ran.

Why: the gateway sends a request's band to Triton as the request's ``priority`` parameter, and
what Triton does with it is order its queue. A model that runs one request at a time, holding its
one instance while it does, lets waiting requests pile up in that queue; each answer says when its
request ran (``order=<n>``, counting from 1 since the model loaded), so a test reads the order
Triton chose. ``hold=<seconds>`` anywhere in the prompt sets how long a request holds the instance
(default 0.05 s; at most 30 s; cancellation is checked every 10 ms).

It follows the vLLM contract: one response with the FINAL flag, ``finish_reason`` "stop",
``num_input_tokens`` the prompt's UTF-8 bytes, ``num_output_tokens`` 1, each only when its
``return_*`` flag is true (``logprobs`` "null", ``cumulative_logprob`` 0).
"""

from __future__ import annotations

import re
import time
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

DEFAULT_HOLD = 0.05
MAX_HOLD = 30.0
_POLL = 0.01
_HOLD = re.compile(rb"hold=([0-9]+(?:\.[0-9]+)?)")
RETURN_FLAGS = (
    "return_finish_reason",
    "return_num_input_tokens",
    "return_num_output_tokens",
    "return_logprobs",
    "return_cumulative_logprob",
)


def _first(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    return values[0] if values.size else None


def _hold(prompt: bytes) -> float:
    match = _HOLD.search(prompt)
    return min(float(match.group(1)), MAX_HOLD) if match else DEFAULT_HOLD


def _outputs(text: str, prompt_tokens: int, flags: dict[str, bool]) -> list[Any]:
    tensors = [pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))]
    if flags["return_finish_reason"]:
        tensors.append(pb_utils.Tensor("finish_reason", np.array(["stop"], dtype=np.object_)))
    if flags["return_num_input_tokens"]:
        tensors.append(pb_utils.Tensor("num_input_tokens", np.array([prompt_tokens], dtype=np.uint32)))
    if flags["return_num_output_tokens"]:
        tensors.append(pb_utils.Tensor("num_output_tokens", np.array([1], dtype=np.uint32)))
    if flags["return_logprobs"]:
        tensors.append(pb_utils.Tensor("logprobs", np.array(["null"], dtype=np.object_)))
    if flags["return_cumulative_logprob"]:
        tensors.append(pb_utils.Tensor("cumulative_logprob", np.zeros(1, dtype=np.float32)))
    return tensors


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self._order = 0
        family = pb_utils.MetricFamily(
            name="priority_order_started_total",
            description="Requests the model has started to run",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self._family = family  # the metric lives as long as its family
        self._started = family.Metric(labels={"model": args["model_name"], "version": args["model_version"]})

    def execute(self, requests: list[Any]) -> None:
        """One request after the other, in the order given, each answered before the next starts
        and before this returns: the instance stays busy, so Triton queues what comes meanwhile."""
        for request in requests:
            sender = request.get_response_sender()
            self._order += 1
            self._started.increment(1.0)
            order = self._order
            prompt = _first(request, "text_input") or b""
            flags = {name: bool(_first(request, name)) for name in RETURN_FLAGS}
            deadline = time.monotonic() + _hold(prompt)
            cancelled = False
            while time.monotonic() < deadline:
                if sender.is_cancelled():
                    cancelled = True
                    break
                time.sleep(_POLL)
            final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            if cancelled:
                sender.send(flags=final)
                continue
            response = pb_utils.InferenceResponse(output_tensors=_outputs(f"order={order}", len(prompt), flags))
            sender.send(response, flags=final)
        return None
