"""Test-only decoupled model: replays the JSON script found in ``text_input`` (format: ../../README.md).

Why a thread per request: a script may hang or sleep between responses, and those waits must
neither block other requests nor hide a cancellation; each thread sleeps in short slices and
checks ``is_cancelled()`` between them. Metrics mirror tiny-llm's so gateway tests can prove that a
client disconnect reached the backend.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import triton_python_backend_utils as pb_utils  # noqa: E402
from replay import RETURN_FLAGS, ScriptError, Step, parse_script, plan  # noqa: E402

BOOL_INPUTS = ("stream", "exclude_input_in_output", *RETURN_FLAGS)
_POLL = 0.01  # seconds between cancellation checks while waiting


def _first(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    return values[0] if values.size else None


def _inputs_record(request: Any) -> dict[str, Any]:
    """Everything the request carried, JSON-ready (for ``echo_inputs`` scripts)."""
    raw_params = _first(request, "sampling_parameters")
    record: dict[str, Any] = {
        name: (None if (value := _first(request, name)) is None else bool(value)) for name in BOOL_INPUTS
    }
    text = _first(request, "text_input")
    record["text_input"] = None if text is None else text.decode("utf-8", errors="replace")
    try:
        record["sampling_parameters"] = None if raw_params is None else json.loads(raw_params)
    except json.JSONDecodeError:
        record["sampling_parameters"] = raw_params.decode("utf-8", errors="replace")
    record["parameters"] = json.loads(request.parameters() or "{}")
    record["request_id"] = request.request_id()
    return record


class _Metrics:
    def __init__(self, labels: dict[str, str]) -> None:
        self._lock = threading.Lock()
        kinds = {
            "scripted_requests_total": ("Requests received", pb_utils.MetricFamily.COUNTER),
            "scripted_requests_cancelled_total": (
                "Requests stopped by a client cancel",
                pb_utils.MetricFamily.COUNTER,
            ),
            "scripted_requests_in_flight": ("Requests being replayed", pb_utils.MetricFamily.GAUGE),
        }
        self._families = [pb_utils.MetricFamily(name=n, description=d, kind=k) for n, (d, k) in kinds.items()]
        self.total, self.cancelled, self.in_flight = (f.Metric(labels=labels) for f in self._families)

    def add(self, metric: Any, value: float) -> None:
        with self._lock:
            metric.increment(value)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self._metrics = _Metrics({"model": args["model_name"], "version": args["model_version"]})

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            self._metrics.add(self._metrics.total, 1.0)
            if sender.is_cancelled():
                self._metrics.add(self._metrics.cancelled, 1.0)
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            record = _inputs_record(request)
            flags = {name: bool(record.get(name)) for name in RETURN_FLAGS}
            try:
                script = parse_script(_first(request, "text_input") or b"", str(record.get("request_id") or ""))
                steps = plan(script, bool(record["stream"]), flags, record)
            except ScriptError as exc:
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                sender.send(
                    pb_utils.InferenceResponse(output_tensors=[], error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            if script.log is not None:
                # The stub's stdout is tritonserver's, which the launcher sends to its log file:
                # tests read there which server ran which request.
                print(f"scripted log: {script.log}", flush=True)
            self._metrics.add(self._metrics.in_flight, 1.0)
            threading.Thread(target=self._replay, args=(sender, script.hang, steps), daemon=True).start()
        return None

    def _wait(self, sender: Any, seconds: float) -> bool:
        """Sleep ``seconds`` in slices; False as soon as the request is cancelled."""
        deadline = time.monotonic() + seconds
        while True:
            if sender.is_cancelled():
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            time.sleep(min(_POLL, remaining))

    def _replay(self, sender: Any, hang: float, steps: list[Step]) -> None:
        released = False
        try:
            for index, step in enumerate(steps):
                if not self._wait(sender, step.delay + (hang if index == 0 else 0.0)):
                    self._metrics.add(self._metrics.in_flight, -1.0)
                    released = True
                    return self._cancel(sender)
                if step.final:
                    # The gauge settles before the client can see the end of its stream.
                    self._metrics.add(self._metrics.in_flight, -1.0)
                    released = True
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if step.final else 0
                if step.error is not None:
                    error = pb_utils.TritonError(step.error)
                    sender.send(pb_utils.InferenceResponse(output_tensors=[], error=error), flags=flags)
                else:
                    tensors = [pb_utils.Tensor(name, array) for name, array in (step.outputs or {}).items()]
                    sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=flags)
            return None
        finally:
            if not released:
                self._metrics.add(self._metrics.in_flight, -1.0)

    def _cancel(self, sender: Any) -> None:
        """Count the cancel, then end the stream with the bare FINAL flag (no response)."""
        self._metrics.add(self._metrics.cancelled, 1.0)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
