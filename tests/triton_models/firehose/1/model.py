"""Test-only decoupled model for benchmarks: emits ``max_tokens`` tiny tokens as fast as it can.

Why: gateway benchmarks must measure the gateway, not a language model. Each token is ``b"tok "``;
streaming sends one response per token, non-streaming one response with all of them. It follows the
vLLM contract (finish_reason "length", num_input_tokens = UTF-8 bytes of the prompt, num_output_tokens
deltas) and checks cancellation every few tokens. A thread per request lets 64+ streams run at once.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

TOKEN = b"tok "
CANCEL_CHECK_EVERY = 8
DEFAULT_MAX_TOKENS = 16  # vLLM's default
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


def _params(raw: bytes | None) -> tuple[int, int]:
    """(max_tokens, n) from sampling_parameters; other keys are accepted and ignored."""
    data = json.loads(raw) if raw else {}
    if not isinstance(data, dict):
        raise ValueError("sampling_parameters must be a JSON object")
    max_tokens = data.get("max_tokens") or DEFAULT_MAX_TOKENS
    n = data.get("n") or 1
    if not isinstance(max_tokens, int) or max_tokens < 1 or not isinstance(n, int) or n < 1:
        raise ValueError("'max_tokens' and 'n' must be positive integers")
    return max_tokens, n


def _outputs(text: bytes, n: int, tokens: int, final: bool, prompt_tokens: int, flags: dict[str, bool]) -> list[Any]:
    tensors = [pb_utils.Tensor("text_output", np.array([text] * n, dtype=np.object_))]
    if flags["return_finish_reason"]:
        reason = "length" if final else "None"
        tensors.append(pb_utils.Tensor("finish_reason", np.array([reason] * n, dtype=np.object_)))
    if flags["return_num_input_tokens"]:
        tensors.append(pb_utils.Tensor("num_input_tokens", np.array([prompt_tokens], dtype=np.uint32)))
    if flags["return_num_output_tokens"]:
        tensors.append(pb_utils.Tensor("num_output_tokens", np.array([tokens] * n, dtype=np.uint32)))
    if flags["return_logprobs"]:
        tensors.append(pb_utils.Tensor("logprobs", np.array(["null"] * n, dtype=np.object_)))
    if flags["return_cumulative_logprob"]:
        tensors.append(pb_utils.Tensor("cumulative_logprob", np.zeros(n, dtype=np.float32)))
    return tensors


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self._lock = threading.Lock()
        self._families = [
            pb_utils.MetricFamily(
                name="firehose_requests_cancelled_total",
                description="Requests stopped by a client cancel",
                kind=pb_utils.MetricFamily.COUNTER,
            ),
            pb_utils.MetricFamily(
                name="firehose_requests_in_flight",
                description="Requests streaming",
                kind=pb_utils.MetricFamily.GAUGE,
            ),
        ]
        self._cancelled, self._in_flight = (family.Metric(labels=labels) for family in self._families)

    def _metric(self, metric: Any, value: float) -> None:
        with self._lock:
            metric.increment(value)

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                max_tokens, n = _params(_first(request, "sampling_parameters"))
            except (ValueError, json.JSONDecodeError) as exc:
                error = pb_utils.TritonError(f"firehose: {exc}", pb_utils.TritonError.INVALID_ARG)
                sender.send(
                    pb_utils.InferenceResponse(output_tensors=[], error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            prompt = _first(request, "text_input") or b""
            flags = {name: bool(_first(request, name)) for name in RETURN_FLAGS}
            stream = bool(_first(request, "stream"))
            self._metric(self._in_flight, 1.0)
            args = (sender, stream, max_tokens, n, len(prompt), flags)
            threading.Thread(target=self._run, args=args, daemon=True).start()
        return None

    def _run(
        self, sender: Any, stream: bool, max_tokens: int, n: int, prompt_tokens: int, flags: dict[str, bool]
    ) -> None:
        final_flag = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if not stream:
            if sender.is_cancelled():
                return self._cancel(sender)
            self._metric(self._in_flight, -1.0)
            tensors = _outputs(TOKEN * max_tokens, n, max_tokens, True, prompt_tokens, flags)
            sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=final_flag)
            return None
        for index in range(max_tokens):
            if index % CANCEL_CHECK_EVERY == 0 and sender.is_cancelled():
                return self._cancel(sender)
            final = index == max_tokens - 1
            if final:
                self._metric(self._in_flight, -1.0)
            tensors = _outputs(TOKEN, n, 1, final, prompt_tokens, flags)
            sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=final_flag if final else 0)
        return None

    def _cancel(self, sender: Any) -> None:
        self._metric(self._in_flight, -1.0)
        self._metric(self._cancelled, 1.0)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
