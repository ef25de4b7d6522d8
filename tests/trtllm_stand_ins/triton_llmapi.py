"""Triton side of the ``llmapi`` stand-in (decoupled, no batch dimension, no torch).

Each request runs in a thread of its own and has the ``tensorrt_llm`` stand-in generate
(parameter ``stand_in_engine_model``), streaming, so the text can be rebuilt here (llmapi.py). The
FINAL flag rides on the last data response, as the LLM API's generator ends: each response is sent
when the next one arrives, and the last one carries the finish reason and FINAL. A Triton cancel
stops the generation and is answered with the error "Request cancelled by client" (CANCELLED); a
``stop`` request with a running request's id ends that request (finish reason "cancelled") and is
itself answered with that error. Errors: "Error generating request: ..." with ``text_output`` N/A.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]
from numpy.typing import NDArray

from tests.trtllm_stand_ins.errors import CANCEL_NEEDS_ID, llmapi_message
from tests.trtllm_stand_ins.llmapi import (
    CANCELLED_BY_CLIENT,
    FINISH_CANCELLED,
    CompletionState,
    LlmApiError,
    LlmApiRequest,
    engine_inputs,
    error_outputs,
    llmapi_outputs,
    parse_llmapi_request,
)
from tests.trtllm_stand_ins.lora import read_peft_adapter
from tests.trtllm_stand_ins.tokenizer import HfTokenizer
from tests.trtllm_stand_ins.triton_calls import CallError, StreamingCall
from tests.trtllm_stand_ins.triton_io import declared_inputs, model_config, model_parameters, read_inputs, required_path

logger = logging.getLogger(__name__)

_PERF = (
    "kv_cache_alloc_new_blocks",
    "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
)
ENGINE_OUTPUTS = ("output_ids", "sequence_length", "cum_log_probs", *_PERF)


def _response(outputs: dict[str, NDArray[Any]], error: Any = None) -> Any:
    tensors = [pb_utils.Tensor(name, array) for name, array in outputs.items()]
    return pb_utils.InferenceResponse(output_tensors=tensors, error=error)


def _cancelled_error() -> Any:
    return pb_utils.TritonError(
        CANCELLED_BY_CLIENT, getattr(pb_utils.TritonError, "CANCELLED", pb_utils.TritonError.INTERNAL)
    )


class _Running:
    """A request in progress, findable by its Triton id for a ``stop``."""

    def __init__(self) -> None:
        self.stop_requested = False


class LlmApiModel:
    def __init__(self, args: dict[str, str]) -> None:
        config = model_config(args)
        parameters = model_parameters(config)
        self._inputs = declared_inputs(config)
        self._tokenizer = HfTokenizer.load(required_path(parameters, "tokenizer_dir"))
        self._engine = parameters.get("stand_in_engine_model", "").strip() or "tensorrt_llm"
        self._lock = threading.Lock()
        self._running: dict[str, list[_Running]] = {}

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            arrays = read_inputs(request, self._inputs)
            stop = arrays.get("stop")
            if stop is not None and stop.size and bool(stop.reshape(-1)[0]):
                self._stop(request)
                continue
            threading.Thread(target=self._serve, args=(request, arrays), name="llmapi-request", daemon=True).start()
        return None

    def _stop(self, request: Any) -> None:
        sender = request.get_response_sender()
        triton_id = str(request.request_id())
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if not triton_id:
            error = pb_utils.TritonError(CANCEL_NEEDS_ID, pb_utils.TritonError.INVALID_ARG)
            sender.send(_response(error_outputs(), error), flags=final)
            return
        with self._lock:
            for running in self._running.get(triton_id, ()):
                running.stop_requested = True
        sender.send(_response({}, _cancelled_error()), flags=final)

    def _serve(self, request: Any, arrays: dict[str, NDArray[Any]]) -> None:
        sender = request.get_response_sender()
        triton_id = str(request.request_id())
        running = _Running()
        with self._lock:
            self._running.setdefault(triton_id, []).append(running)
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            outputs = self._generate(arrays, sender, running)
            if outputs is None:
                sender.send(_response({}, _cancelled_error()), flags=final)
            else:
                sender.send(_response(outputs), flags=final)
        except (LlmApiError, CallError) as exc:
            message = exc.message if isinstance(exc, LlmApiError) else llmapi_message(str(exc))
            sender.send(_response(error_outputs(), pb_utils.TritonError(message)), flags=final)
        except Exception as exc:  # noqa: BLE001 - the upstream model answers every failure the same way
            logger.exception("stand-in llmapi failed")
            sender.send(_response(error_outputs(), pb_utils.TritonError(llmapi_message(str(exc)))), flags=final)
        finally:
            with self._lock:
                entries = self._running.get(triton_id, [])
                if running in entries:
                    entries.remove(running)
                if not entries:
                    self._running.pop(triton_id, None)

    def _engine_inputs(self, request: LlmApiRequest) -> dict[str, NDArray[Any]]:
        tokenizer = self._tokenizer
        inputs = engine_inputs(request, tokenizer.encode(request.prompt), tokenizer.end_id, tokenizer.pad_id)
        if request.lora is not None:
            weights, layout = read_peft_adapter(request.lora.path)
            inputs["lora_task_id"] = np.array([[request.lora.lora_id]], dtype=np.uint64)
            inputs["lora_weights"], inputs["lora_config"] = weights.astype(np.float16), layout
        return inputs

    def _generate(
        self, arrays: dict[str, NDArray[Any]], sender: Any, running: _Running
    ) -> dict[str, NDArray[Any]] | None:
        """The final response's outputs (earlier ones are sent here), or None when Triton cancelled."""
        request = parse_llmapi_request(arrays)
        generation = StreamingCall(self._engine, self._engine_inputs(request), ENGINE_OUTPUTS)
        state = CompletionState(request, [])
        held: dict[str, NDArray[Any]] | None = None
        perf: dict[str, NDArray[Any]] = {}
        cancelled = False
        for outputs in generation:
            if generation.stopped:
                continue  # the engine's last responses after a stop
            if sender.is_cancelled() or running.stop_requested:
                cancelled = not running.stop_requested
                if running.stop_requested:
                    state.finish_reason = FINISH_CANCELLED
                generation.stop()
                continue
            length = int(outputs["sequence_length"].reshape(-1)[0])
            hit_stop = state.add(outputs["output_ids"].reshape(-1)[:length].tolist(), self._tokenizer.decode)
            if "cum_log_probs" in outputs:
                state.cumulative_logprob = float(outputs["cum_log_probs"].reshape(-1)[0])
            perf = {name: outputs[name] for name in _PERF if name in outputs}
            if request.streaming:
                if held is not None:
                    sender.send(_response(held))
                held = llmapi_outputs(state, perf)
            if hit_stop:
                generation.stop()
        if cancelled:
            logger.warning("stand-in llmapi: request cancelled after %d tokens", len(state.tokens))
            return None
        state.end()
        return llmapi_outputs(state, perf)

    def finalize(self) -> None:
        return None
