"""Triton side of the ``tensorrt_llm_bls`` stand-ins (decoupled; no torch).

Each request runs in a thread of its own (``execute`` returns at once), so one slow request does
not hold up the next; the upstream BLS serves one request per instance at a time, which only
changes throughput. Per request: preprocessing (one call), the model named by
``tensorrt_llm_model_name`` (a decoupled call), postprocessing per response; data responses go out
with flag 0 and the request ends with a separate empty FINAL. A Triton cancel is checked after
every response and stops the model's call (``stop``, triton_calls.py). An error is answered as the
upstream BLS answers it: a response carrying the Python traceback, then the empty FINAL.
"""

from __future__ import annotations

import logging
import threading
import traceback
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

from tests.trtllm_stand_ins.bls import (
    ENGINE_OUTPUTS,
    PASSTHROUGH_OUTPUTS,
    PREPROCESSING_OUTPUTS,
    TextStops,
    TokenAccumulator,
    engine_inputs,
    is_streaming,
    preprocessing_inputs,
    stop_strings,
)
from tests.trtllm_stand_ins.triton_calls import StreamingCall, call
from tests.trtllm_stand_ins.triton_io import (
    declared_inputs,
    flag_parameter,
    model_config,
    model_parameters,
    read_inputs,
)

logger = logging.getLogger(__name__)


class BlsModel:
    def __init__(self, args: dict[str, str]) -> None:
        config = model_config(args)
        parameters = model_parameters(config)
        self._inputs = declared_inputs(config)
        self._accumulate = flag_parameter(parameters, "accumulate_tokens", False)
        self._engine = parameters.get("tensorrt_llm_model_name", "").strip() or "tensorrt_llm"
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            thread = threading.Thread(target=self._serve, args=(request,), name="bls-request", daemon=True)
            with self._lock:
                self._threads.add(thread)
            thread.start()
        return None

    def _serve(self, request: Any) -> None:
        sender = request.get_response_sender()
        try:
            self._generate(request, sender)
        except Exception:  # noqa: BLE001 - every failure is answered, as the upstream BLS answers it
            error = pb_utils.TritonError(traceback.format_exc())
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=error))
        finally:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _generate(self, request: Any, sender: Any) -> None:
        arrays = read_inputs(request, self._inputs)
        preprocessed = call("preprocessing", preprocessing_inputs(arrays), PREPROCESSING_OUTPUTS)
        generation = StreamingCall(self._engine, engine_inputs(arrays, preprocessed), ENGINE_OUTPUTS)
        accumulator = TokenAccumulator(self._accumulate)
        stops = TextStops(stop_strings(arrays), cumulative=self._accumulate)
        streaming = is_streaming(arrays)
        for outputs in generation:
            if sender.is_cancelled():
                logger.warning("stand-in BLS: request %r cancelled; stopping %s", request.request_id(), self._engine)
                generation.stop()
                continue
            if generation.stopped:
                continue  # the model's last responses after a stop: nothing more is sent
            batch_index = int(outputs["batch_index"].reshape(-1)[0]) if "batch_index" in outputs else 0
            tokens, lengths = accumulator.tokens_for(outputs["output_ids"], outputs["sequence_length"], batch_index)
            decoded = call("postprocessing", {"TOKENS_BATCH": tokens, "SEQUENCE_LENGTH": lengths}, ["OUTPUT"])["OUTPUT"]
            texts = [stops.apply(item.decode("utf-8", errors="replace")) for item in decoded.reshape(-1)]
            tensors = [pb_utils.Tensor("text_output", np.array([[t.encode("utf-8") for t in texts]], dtype=object))]
            tensors.extend(pb_utils.Tensor(name, outputs[name]) for name in PASSTHROUGH_OUTPUTS if name in outputs)
            sender.send(pb_utils.InferenceResponse(output_tensors=tensors))
            if stops.stopped and streaming:
                generation.stop()

    def finalize(self) -> None:
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(5)
