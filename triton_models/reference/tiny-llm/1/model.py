"""Triton entry point of tiny-llm: a decoupled python-backend model with the vLLM-backend contract.

Deliberately thin: it reads tensors into plain values, adapts Triton's response sender and metrics
to small protocols, and hands every request to the scheduler thread (see scheduler.py for why one
thread owns the model). All logic lives in the modules beside this file, which the unit tests
import without Triton.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

# The helper modules sit beside this file; the stub does not put this directory on sys.path.
_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import triton_python_backend_utils as pb_utils  # noqa: E402
from contract import BOOL_INPUTS, IMAGE, RESUME_TOKEN_IDS, SAMPLING_PARAMETERS, TEXT_INPUT, RawRequest  # noqa: E402
from engine import TinyLlmEngine  # noqa: E402
from model_config import load_model_config, step_delay_from_env  # noqa: E402
from scheduler import Scheduler  # noqa: E402

logger = logging.getLogger(__name__)


def _first(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    return values[0] if values.size else None


def read_request(request: Any) -> RawRequest:
    """The request's tensors as plain Python values (BYTES elements arrive as ``bytes``)."""
    flags = {name: (None if (value := _first(request, name)) is None else bool(value)) for name in BOOL_INPUTS}
    images = pb_utils.get_input_tensor_by_name(request, IMAGE)
    resume = pb_utils.get_input_tensor_by_name(request, RESUME_TOKEN_IDS)
    return RawRequest(
        text_input=_first(request, TEXT_INPUT),
        sampling_parameters=_first(request, SAMPLING_PARAMETERS),
        images=tuple(images.as_numpy().reshape(-1)) if images is not None else (),
        resume_token_ids=tuple(int(i) for i in resume.as_numpy().reshape(-1)) if resume is not None else None,
        **flags,
    )


def _explain_import_error(exc: ImportError) -> str:
    """Seen with pyenv: the stub links the system libpython3.11 but imports the venv's stdlib, whose C
    extensions (``_ssl``, pulled in by transformers) need symbols only the newer libpython has."""
    if "undefined symbol" not in str(exc):
        return str(exc)
    return (
        f"{exc}. The python backend stub runs a different libpython than the venv's Python: start "
        "tritonserver with LD_LIBRARY_PATH beginning with that Python's LIBDIR "
        "(python -c 'import sysconfig; print(sysconfig.get_config_var(\"LIBDIR\"))')"
    )


class TritonSink:
    """ResponseSink over a decoupled response sender."""

    def __init__(self, sender: Any) -> None:
        self._sender = sender

    def is_cancelled(self) -> bool:
        return bool(self._sender.is_cancelled())

    def send(self, outputs: dict[str, np.ndarray], final: bool) -> None:
        response = pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(name, array) for name, array in outputs.items()]
        )
        self._sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0)

    def send_error(self, message: str) -> None:
        error = pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)
        self._sender.send(
            pb_utils.InferenceResponse(output_tensors=[], error=error),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )

    def close(self) -> None:
        self._sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class TritonMetrics:
    """The custom metric families on Triton's metrics port; one lock serialises calls from two threads.
    The ``vllm:`` gauges have the vLLM engine's names, so a router reading either backend's
    metrics sees one set of names."""

    def __init__(self, labels: dict[str, str]) -> None:
        self._lock = threading.Lock()
        self._families = [
            pb_utils.MetricFamily(
                name="tiny_llm_requests_total",
                description="Requests received by tiny-llm (valid or not)",
                kind=pb_utils.MetricFamily.COUNTER,
            ),
            pb_utils.MetricFamily(
                name="tiny_llm_requests_cancelled_total",
                description="Requests whose work stopped because the client cancelled",
                kind=pb_utils.MetricFamily.COUNTER,
            ),
            pb_utils.MetricFamily(
                name="tiny_llm_requests_in_flight",
                description="Requests queued or generating inside tiny-llm",
                kind=pb_utils.MetricFamily.GAUGE,
            ),
            pb_utils.MetricFamily(
                name="vllm:num_requests_running",
                description="Requests the engine is stepping now",
                kind=pb_utils.MetricFamily.GAUGE,
            ),
            pb_utils.MetricFamily(
                name="vllm:num_requests_waiting",
                description="Requests admitted but not stepping yet (beyond max_num_seqs, or not yet taken in)",
                kind=pb_utils.MetricFamily.GAUGE,
            ),
            pb_utils.MetricFamily(
                name="vllm:kv_cache_usage_perc",
                description="Tokens held by running sequences over model.json's kv_cache_tokens (1 = full)",
                kind=pb_utils.MetricFamily.GAUGE,
            ),
        ]
        self._total, self._cancelled, self._in_flight, *self._load = (
            family.Metric(labels=labels) for family in self._families
        )
        self._load_values = [0.0, 0.0, 0.0]

    def request_received(self) -> None:
        with self._lock:
            self._total.increment(1.0)

    def request_cancelled(self) -> None:
        with self._lock:
            self._cancelled.increment(1.0)

    def in_flight_add(self, delta: int) -> None:
        with self._lock:
            self._in_flight.increment(float(delta))

    def engine_load(self, running: int, waiting: int, kv_usage: float) -> None:
        with self._lock:
            for index, value in enumerate((float(running), float(waiting), kv_usage)):
                if value != self._load_values[index]:
                    self._load[index].set(value)
                    self._load_values[index] = value


class TritonPythonModel:
    """Triton's python-backend interface."""

    def initialize(self, args: dict[str, str]) -> None:
        if not pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"])):
            raise ValueError("tiny-llm streams its responses: config.pbtxt must set decoupled: true")
        config = load_model_config(_HERE)
        step_delay = step_delay_from_env(os.environ)
        try:
            self._engine = TinyLlmEngine(config)
        except ImportError as exc:
            raise ImportError(_explain_import_error(exc)) from exc
        self._metrics = TritonMetrics({"model": args["model_name"], "version": args["model_version"]})
        self._scheduler = Scheduler(self._engine, self._metrics, step_delay)
        self._scheduler.start()
        logger.info("tiny-llm ready (adapters: %s, step delay %.1f ms)", list(config.adapters), step_delay * 1000)

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            self._scheduler.handle(read_request(request), TritonSink(request.get_response_sender()))
        return None

    def finalize(self) -> None:
        self._scheduler.shutdown()
