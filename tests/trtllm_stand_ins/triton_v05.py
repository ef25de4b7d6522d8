"""Triton side of the ``ensemble_v05`` stand-in (decoupled; no torch).

Each request runs in a thread of its own: tokenize (the tiny-sp tokenizer), have the
``tensorrt_llm`` stand-in generate (parameter ``stand_in_engine_model``), decode each response on
its own. The FINAL flag rides on the last data response, as an ensemble over the decoupled model
forwards it: each response is sent when the next one arrives. A Triton cancel stops the
generation (``stop``) and ends the request with an empty FINAL. An error from the engine is
answered as an ensemble answers it: one error response with FINAL.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

from tests.trtllm_stand_ins.tokenizer import HfTokenizer
from tests.trtllm_stand_ins.triton_calls import CallError, StreamingCall
from tests.trtllm_stand_ins.triton_io import (
    declared_inputs,
    flag_parameter,
    model_config,
    model_parameters,
    read_inputs,
    required_path,
)
from tests.trtllm_stand_ins.v05 import V05Error, engine_inputs, text_output

logger = logging.getLogger(__name__)


class V05EnsembleModel:
    def __init__(self, args: dict[str, str]) -> None:
        config = model_config(args)
        parameters = model_parameters(config)
        self._inputs = declared_inputs(config)
        self._tokenizer = HfTokenizer.load(required_path(parameters, "tokenizer_dir"))
        self._exclude_input = flag_parameter(parameters, "exclude_input_in_output", False)
        self._engine = parameters.get("stand_in_engine_model", "").strip() or "tensorrt_llm"

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            threading.Thread(target=self._serve, args=(request,), name="v05-request", daemon=True).start()
        return None

    def _serve(self, request: Any) -> None:
        sender = request.get_response_sender()
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            inputs = engine_inputs(read_inputs(request, self._inputs), self._tokenizer, self._exclude_input)
            generation = StreamingCall(self._engine, inputs, ["output_ids", "sequence_length"])
            held = None
            for outputs in generation:
                if generation.stopped:
                    continue
                if sender.is_cancelled():
                    logger.warning("stand-in ensemble_v05: request cancelled; stopping %s", self._engine)
                    generation.stop()
                    continue
                if held is not None:
                    sender.send(held)
                text = text_output(self._tokenizer, outputs["output_ids"], outputs["sequence_length"])
                held = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text_output", text)])
            if held is None or generation.stopped:
                sender.send(flags=final)
            else:
                sender.send(held, flags=final)
        except (V05Error, CallError, KeyError, ValueError) as exc:
            error = pb_utils.TritonError(str(exc))
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=error), flags=final)

    def finalize(self) -> None:
        return None
