"""Triton side of the ``tensorrt_llm`` / ``tensorrt_llm_nd`` stand-ins (one class, both modes).

``execute`` reads the declared inputs, answers a ``stop`` request, converts the request
(``request_tensors.parse_request``: a failure is one FINAL error with the conversion's text) and hands it
to the instance's executor thread; it never waits for tokens.

Parameters (config.pbtxt): ``gpt_model_path`` (tiny-llm's weights), ``exclude_input_in_output``,
``max_beam_width``, ``cancellation_check_period_ms``, ``guided_decoding_backend`` +
``tokenizer_dir``, and the stand-in knobs ``stand_in_tokens_per_response``,
``stand_in_lora_cache_tasks``, ``stand_in_kv_block_size`` (see the repository's README).
"""

from __future__ import annotations

import logging
from typing import Any

from tests.trtllm_stand_ins.engine import StandInEngine
from tests.trtllm_stand_ins.errors import CANCEL_NEEDS_ID, ConversionError
from tests.trtllm_stand_ins.executor import Executor, ExecutorSettings
from tests.trtllm_stand_ins.guides import GuideCompiler
from tests.trtllm_stand_ins.request_tensors import cancel_target, parse_request
from tests.trtllm_stand_ins.responses import chunk_sizes
from tests.trtllm_stand_ins.tokenizer import HfTokenizer
from tests.trtllm_stand_ins.triton_io import (
    TritonMetrics,
    TritonSink,
    declared_inputs,
    flag_parameter,
    is_decoupled,
    model_config,
    model_parameters,
    read_inputs,
    requested_outputs,
    required_path,
)

logger = logging.getLogger(__name__)

REQUIRED_OUTPUTS = frozenset({"output_ids", "sequence_length"})
MISSING_OUTPUTS = (
    "Error encountered while populating response: the request must ask for both output_ids and sequence_length"
)


def build_guides(parameters: dict[str, str]) -> GuideCompiler | None:
    """The guide compiler, when the model is configured for guided decoding (§2.10)."""
    if parameters.get("guided_decoding_backend", "").strip() != "xgrammar":
        return None
    tokenizer = HfTokenizer.load(required_path(parameters, "tokenizer_dir"))
    return GuideCompiler(tokenizer.json, tokenizer.vocab_size, tokenizer.end_id)


class TrtllmModel:
    def __init__(self, args: dict[str, str]) -> None:
        config = model_config(args)
        parameters = model_parameters(config)
        self._decoupled = is_decoupled(config)
        self._inputs = declared_inputs(config)
        self._exclude_input = flag_parameter(parameters, "exclude_input_in_output", False)
        settings = ExecutorSettings(
            tokens_per_response=chunk_sizes(parameters.get("stand_in_tokens_per_response", "1,3,2")),
            max_beam_width=int(parameters.get("max_beam_width", "1")),
            lora_cache_tasks=int(parameters.get("stand_in_lora_cache_tasks", "1")),
            kv_block_size=int(parameters.get("stand_in_kv_block_size", "4")),
            cancellation_check_period_ms=float(parameters.get("cancellation_check_period_ms", "100")),
        )
        engine = StandInEngine(required_path(parameters, "gpt_model_path"))
        self._executor = Executor(
            engine, build_guides(parameters), settings, TritonMetrics(args["model_name"]), name=args["model_name"]
        )
        self._executor.start()

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            self._handle(request)
        return None

    def _handle(self, request: Any) -> None:
        requested = requested_outputs(request)
        sink = TritonSink(request, self._decoupled, requested)
        arrays = read_inputs(request, self._inputs)
        triton_id = str(request.request_id())
        if cancel_target(arrays):
            if not triton_id:
                sink.send_error(CANCEL_NEEDS_ID, "INVALID_ARG")
                return
            stopped = self._executor.stop(triton_id)
            logger.info("stop request for %r: %d running request(s) marked", triton_id, stopped)
            sink.send_empty_final()
            return
        if requested and not REQUIRED_OUTPUTS <= requested:
            sink.send_error(MISSING_OUTPUTS)
            return
        try:
            specs = parse_request(arrays, decoupled=self._decoupled, exclude_input_default=self._exclude_input)
        except ConversionError as exc:
            sink.send_error(str(exc))
            return
        self._executor.submit(specs, sink, triton_id)

    def finalize(self) -> None:
        self._executor.shutdown()
