"""Triton entry point of tiny-llm-embed: tiny-llm's weights as an embedding model.

Thin: tensors in, ``pooling.py`` (pure, unit-tested) for the request and the pooling, one forward
of the base Llama model (no LM head) per request. Each request is answered inside ``execute``
(one decoupled response, FINAL): a forward of this model takes about a millisecond, so a thread
of its own would buy nothing.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import triton_python_backend_utils as pb_utils  # noqa: E402
from pooling import EmbedRequestError, check_tokens, load_embed_config, parse_embedding_request, pool_last  # noqa: E402

logger = logging.getLogger(__name__)


def _first(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    return values[0] if values.size else None


class _Cancelled(Exception):
    pass


class TritonPythonModel:
    """Triton's python-backend interface."""

    def initialize(self, args: dict[str, str]) -> None:
        if not pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"])):
            raise ValueError("tiny-llm-embed speaks the vLLM backend's contract: config.pbtxt must set decoupled: true")
        import torch
        from transformers import AutoTokenizer, LlamaForCausalLM

        self._torch = torch
        self._name = args["model_name"]
        self._config = load_embed_config(_HERE)
        torch.set_num_threads(self._config.num_threads)
        self._tokenizer = AutoTokenizer.from_pretrained(str(self._config.model_dir))
        causal = LlamaForCausalLM.from_pretrained(str(self._config.model_dir), dtype=torch.float32).eval()
        self._model = causal.model  # the decoder and its final norm: what vLLM's pooler reads
        self._hidden_size = int(causal.config.hidden_size)
        self._vocab_size = len(self._tokenizer)
        logger.info("tiny-llm-embed ready (hidden size %d)", self._hidden_size)

    def execute(self, requests: list[Any]) -> None:
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for request in requests:
            sender = request.get_response_sender()
            try:
                if sender.is_cancelled():  # cancelled while queued: no work
                    raise _Cancelled
                response = pb_utils.InferenceResponse(output_tensors=self._embed(request))
            except _Cancelled:
                error = pb_utils.TritonError("Request was cancelled", pb_utils.TritonError.CANCELLED)
                response = pb_utils.InferenceResponse(output_tensors=[], error=error)
            except EmbedRequestError as exc:
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                response = pb_utils.InferenceResponse(output_tensors=[], error=error)
            sender.send(response, flags=final)
        return None

    def _embed(self, request: Any) -> list[Any]:
        raw = _first(request, "embedding_request")
        if raw is None:
            raise EmbedRequestError("tiny-llm-embed needs the embedding_request input")
        asked = parse_embedding_request(raw, self._name, self._config, self._hidden_size)
        if isinstance(asked.input, str):
            ids = list(self._tokenizer(asked.input, add_special_tokens=True)["input_ids"])
        else:
            ids = asked.input
        if not ids:
            raise EmbedRequestError("The decoder prompt cannot be empty")
        check_tokens(ids, self._vocab_size, self._config.max_model_len)
        torch = self._torch
        with torch.inference_mode():
            hidden = self._model(input_ids=torch.tensor([ids], dtype=torch.long)).last_hidden_state[0, -1]
        vector = pool_last(hidden.float().tolist(), asked.dimensions)
        outputs = [pb_utils.Tensor("text_output", np.asarray([json.dumps(vector)], dtype=np.object_))]
        if _first(request, "return_num_input_tokens"):
            outputs.append(pb_utils.Tensor("num_input_tokens", np.asarray(len(ids), dtype=np.uint32)))
        if _first(request, "return_num_output_tokens"):
            outputs.append(pb_utils.Tensor("num_output_tokens", np.asarray(0, dtype=np.uint32)))
        return outputs
