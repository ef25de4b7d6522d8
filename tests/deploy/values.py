"""Helm values for the chart tests, built from parts."""

from __future__ import annotations

import copy
from typing import Any


def merge_values(*parts: dict[str, Any]) -> dict[str, Any]:
    """Helm values deep-merged, later parts winning (as ``helm -f a -f b`` merges them)."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge_values(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


# TensorRT-LLM on the chart-run Triton: NGC's TensorRT-LLM image, the engines, tokenizers and
# repository on one volume (every path the model configs name lies under /models, where the
# gateway mounts the same volume), and per layout the gateway's model_files entry.
TRTLLM_IMAGE_TAG = "25.12-trtllm-python-py3"
TOKENIZER = "/models/weights/Llama-3.1-8B-Instruct"
TRTLLM = {
    "triton": {
        "image": {"tag": TRTLLM_IMAGE_TAG},
        "modelRepository": {"pvc": {"existingClaim": "trtllm-models"}},
    }
}
TRTLLM_MODEL_FILES: dict[str, dict[str, dict[str, Any]]] = {
    # NVIDIA's ensemble, the token route where possible (the default): only the context length,
    # which no file of a TensorRT-LLM repository states
    "ensemble": {"ensemble": {"max_model_len": 8192}},
    # the ensemble driven through its own text (its per-response decoding)
    "ensemble-model-route": {"ensemble": {"max_model_len": 8192, "trtllm_route": "model"}},
    # the BLS model, insisting on the token route
    "bls": {"tensorrt_llm_bls": {"max_model_len": 8192, "trtllm_route": "tokens", "tool_call_parser": "llama3_json"}},
    # the tensorrt_llm model itself: token ids in and out, tokenized by the gateway
    "tensorrt_llm": {"tensorrt_llm": {"layout": "tensorrt_llm", "tokenizer": TOKENIZER, "max_model_len": 8192}},
    # the LLM-API model (its model.yaml names the checkpoint; the gateway counts with it)
    "llmapi": {"tensorrt_llm": {"layout": "llmapi", "tokenizer": TOKENIZER, "max_model_len": 8192}},
}
TRTLLM_SCENARIOS: dict[str, dict[str, Any]] = {
    f"trtllm-{layout}": merge_values(TRTLLM, {"gateway": {"modelFiles": files}})
    for layout, files in TRTLLM_MODEL_FILES.items()
}
TRTLLM_SCENARIOS["trtllm-sidecar"] = merge_values(
    TRTLLM,
    {
        "triton": {"mode": "sidecar"},
        "gateway": {"replicaCount": 1, "modelFiles": TRTLLM_MODEL_FILES["ensemble"]},
    },
)
TRTLLM_SCENARIOS["trtllm-external"] = {
    "triton": {"mode": "external", "external": {"url": "triton-trtllm.gpu-pool.svc.cluster.local:8001"}},
    "gateway": {
        "modelRepository": {"existingClaim": "trtllm-models-ro", "mountPath": "/models", "path": "/models/repository"},
        "modelFiles": TRTLLM_MODEL_FILES["bls"],
    },
}
