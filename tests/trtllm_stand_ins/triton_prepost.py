"""Triton side of ``preprocessing`` and ``postprocessing``: not decoupled, no torch.

Parameters: ``tokenizer_dir`` (both), ``add_special_tokens`` (preprocessing, default true),
``skip_special_tokens`` (postprocessing, default true). An error is the request's one response
(Triton's usual answer of a model that is not decoupled; an ensemble then fails the request).
"""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]
from numpy.typing import NDArray

from tests.trtllm_stand_ins.prepost import PreprocessingError, Preprocessor, postprocess
from tests.trtllm_stand_ins.tokenizer import HfTokenizer
from tests.trtllm_stand_ins.triton_io import (
    declared_inputs,
    flag_parameter,
    model_config,
    model_parameters,
    read_inputs,
    required_path,
)


def _response(outputs: dict[str, NDArray[Any]]) -> Any:
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, array) for name, array in outputs.items()])


def _error(message: str) -> Any:
    return pb_utils.InferenceResponse(
        output_tensors=[], error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)
    )


class PreprocessingModel:
    def __init__(self, args: dict[str, str]) -> None:
        config = model_config(args)
        parameters = model_parameters(config)
        self._inputs = declared_inputs(config)
        self._preprocessor = Preprocessor(
            HfTokenizer.load(required_path(parameters, "tokenizer_dir")),
            add_special_tokens=flag_parameter(parameters, "add_special_tokens", True),
        )

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                responses.append(_response(self._preprocessor.run(read_inputs(request, self._inputs))))
            except (PreprocessingError, KeyError, ValueError) as exc:
                responses.append(_error(f"preprocessing: {exc}"))
        return responses

    def finalize(self) -> None:
        return None


class PostprocessingModel:
    def __init__(self, args: dict[str, str]) -> None:
        parameters = model_parameters(model_config(args))
        self._tokenizer = HfTokenizer.load(required_path(parameters, "tokenizer_dir"))
        self._skip_special = flag_parameter(parameters, "skip_special_tokens", True)

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
            lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()
            try:
                output = postprocess(self._tokenizer, tokens, lengths, self._skip_special)
            except (ValueError, IndexError) as exc:
                responses.append(_error(f"postprocessing: {exc}"))
                continue
            responses.append(_response({"OUTPUT": output}))
        return responses

    def finalize(self) -> None:
        return None
