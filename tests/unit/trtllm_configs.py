"""TensorRT-LLM model configs as Triton serves them (``ModelConfig`` protobufs parsed from their
``config.pbtxt`` text, template placeholders filled), per the facts in
``/work/shared/reference/tensorrt-llm-contract.md`` (§1: the ensemble, ``tensorrt_llm``,
preprocessing, postprocessing, BLS and LLM-API models; §3: the v0.5.0 ensemble). Shared by the
contract and catalog tests, and helpers to read back what a contract encoded."""

from __future__ import annotations

import struct
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2, service_pb2

from gateway.backend.contracts.interface import read_interface
from gateway.backend.types import ModelInterface


def _tensor(name: str, data_type: str, dims: str, optional: bool = False) -> str:
    flag = " optional: true" if optional else ""
    return f'{{ name: "{name}" data_type: TYPE_{data_type} dims: [ {dims} ]{flag} }}'


def _tensors(kind: str, rows: list[tuple[Any, ...]]) -> str:
    return f"{kind} [\n  " + ",\n  ".join(_tensor(*row) for row in rows) + "\n]\n"


def parse(text: str) -> Any:
    """A ``ModelConfig`` from ``config.pbtxt`` text."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


# §1.1, the ensemble as of 2025 (`ifb/ensemble/config.pbtxt` @2a9abd95): every input of its table.
ENSEMBLE_INPUTS: list[tuple[Any, ...]] = [
    ("text_input", "STRING", "1"),
    ("decoder_text_input", "STRING", "1", True),
    ("max_tokens", "INT32", "1"),
    ("num_return_sequences", "INT32", "1", True),
    ("bad_words", "STRING", "-1", True),
    ("stop_words", "STRING", "-1", True),
    ("exclude_input_in_output", "BOOL", "1", True),
    ("end_id", "INT32", "1", True),
    ("pad_id", "INT32", "1", True),
    ("top_k", "INT32", "1", True),
    ("top_p", "FP32", "1", True),
    ("temperature", "FP32", "1", True),
    ("length_penalty", "FP32", "1", True),
    ("repetition_penalty", "FP32", "1", True),
    ("presence_penalty", "FP32", "1", True),
    ("frequency_penalty", "FP32", "1", True),
    ("min_tokens", "INT32", "1", True),
    ("seed", "UINT64", "1", True),
    ("return_log_probs", "BOOL", "1", True),
    ("return_context_logits", "BOOL", "1", True),
    ("return_generation_logits", "BOOL", "1", True),
    ("return_perf_metrics", "BOOL", "1", True),
    ("return_num_input_tokens", "BOOL", "1", True),
    ("return_num_output_tokens", "BOOL", "1", True),
    ("beam_width", "INT32", "1", True),
    ("stream", "BOOL", "1", True),
    ("prompt_embedding_table", "FP16", "-1, -1", True),
    ("prompt_table_extra_id", "UINT64", "1", True),
    ("prompt_vocab_size", "INT32", "1", True),
    ("embedding_bias_words", "STRING", "-1", True),
    ("embedding_bias_weights", "FP32", "-1", True),
    ("lora_task_id", "UINT64", "1", True),
    ("lora_weights", "FP16", "-1, -1", True),
    ("lora_config", "INT32", "-1, 3", True),
    ("guided_decoding_guide_type", "STRING", "1", True),
    ("guided_decoding_guide", "STRING", "1", True),
]
ENSEMBLE_OUTPUTS: list[tuple[Any, ...]] = [
    ("text_output", "STRING", "-1"),
    ("cum_log_probs", "FP32", "-1"),
    ("output_log_probs", "FP32", "-1, -1"),
    ("context_logits", "FP32", "-1, -1"),
    ("generation_logits", "FP32", "-1, -1, -1"),
    ("batch_index", "INT32", "1"),
    ("sequence_index", "INT32", "1"),
    ("num_input_tokens", "INT32", "1"),
    ("num_output_tokens", "INT32", "1"),
]

ENSEMBLE = (
    'name: "ensemble"\nplatform: "ensemble"\nmax_batch_size: 64\n'
    + _tensors("input", ENSEMBLE_INPUTS)
    + _tensors("output", ENSEMBLE_OUTPUTS)
    + """
ensemble_scheduling {
  step [
    { model_name: "preprocessing" model_version: -1
      input_map { key: "QUERY" value: "text_input" }
      output_map { key: "INPUT_ID" value: "_INPUT_ID" } },
    { model_name: "tensorrt_llm" model_version: -1
      input_map { key: "input_ids" value: "_INPUT_ID" }
      output_map { key: "output_ids" value: "_TOKENS_BATCH" } },
    { model_name: "postprocessing" model_version: -1
      input_map { key: "TOKENS_BATCH" value: "_TOKENS_BATCH" }
      output_map { key: "OUTPUT" value: "text_output" } }
  ]
}
"""
)

# §3, v0.5.0 (2023-11-02): UINT32 fields, random_seed/min_length, words required (one
# comma-separated string), text_output [-1, -1], no exclude_input_in_output, no counts.
ENSEMBLE_V050 = (
    'name: "ensemble"\nplatform: "ensemble"\nmax_batch_size: 128\n'
    + _tensors(
        "input",
        [
            ("text_input", "STRING", "-1"),
            ("max_tokens", "UINT32", "-1"),
            ("bad_words", "STRING", "-1"),
            ("stop_words", "STRING", "-1"),
            ("end_id", "UINT32", "1", True),
            ("pad_id", "UINT32", "1", True),
            ("top_k", "UINT32", "1", True),
            ("top_p", "FP32", "1", True),
            ("temperature", "FP32", "1", True),
            ("length_penalty", "FP32", "1", True),
            ("repetition_penalty", "FP32", "1", True),
            ("min_length", "UINT32", "1", True),
            ("presence_penalty", "FP32", "1", True),
            ("random_seed", "UINT64", "1", True),
            ("beam_width", "UINT32", "1", True),
            ("stream", "BOOL", "1", True),
        ],
    )
    + _tensors("output", [("text_output", "STRING", "-1, -1")])
    + """
ensemble_scheduling {
  step [
    { model_name: "preprocessing" model_version: -1 },
    { model_name: "tensorrt_llm" model_version: -1 },
    { model_name: "postprocessing" model_version: -1 }
  ]
}
"""
)

# §1.2, `tensorrt_llm` (`ifb/tensorrt_llm/config.pbtxt` @2a9abd95), the C++ backend.
TENSORRT_LLM_INPUTS: list[tuple[Any, ...]] = [
    ("input_ids", "INT32", "-1", True),
    ("input_lengths", "INT32", "1"),
    ("request_output_len", "INT32", "1"),
    ("end_id", "INT32", "1", True),
    ("pad_id", "INT32", "1", True),
    ("beam_width", "INT32", "1", True),
    ("runtime_top_k", "INT32", "1", True),
    ("runtime_top_p_reset_ids", "INT32", "1", True),
    ("min_tokens", "INT32", "1", True),
    ("num_return_sequences", "INT32", "1", True),
    ("temperature", "FP32", "1", True),
    ("runtime_top_p", "FP32", "1", True),
    ("runtime_top_p_min", "FP32", "1", True),
    ("runtime_top_p_decay", "FP32", "1", True),
    ("len_penalty", "FP32", "1", True),
    ("repetition_penalty", "FP32", "1", True),
    ("beam_search_diversity_rate", "FP32", "1", True),
    ("presence_penalty", "FP32", "1", True),
    ("frequency_penalty", "FP32", "1", True),
    ("draft_acceptance_threshold", "FP32", "1", True),
    ("seed", "UINT64", "1", True),
    ("early_stopping", "BOOL", "1", True),
    ("return_log_probs", "BOOL", "1", True),
    ("return_context_logits", "BOOL", "1", True),
    ("return_generation_logits", "BOOL", "1", True),
    ("return_perf_metrics", "BOOL", "1", True),
    ("return_num_input_tokens", "BOOL", "1", True),
    ("return_num_output_tokens", "BOOL", "1", True),
    ("exclude_input_in_output", "BOOL", "1", True),
    ("stop", "BOOL", "1", True),
    ("streaming", "BOOL", "1", True),
    ("stop_words_list", "INT32", "2, -1", True),
    ("bad_words_list", "INT32", "2, -1", True),
    ("embedding_bias", "FP32", "-1", True),
    ("prompt_embedding_table", "FP16", "-1, -1", True),
    ("prompt_table_extra_ids", "UINT64", "-1", True),
    ("prompt_vocab_size", "INT32", "1", True),
    ("lora_task_id", "UINT64", "1", True),
    ("lora_weights", "FP16", "-1, -1", True),
    ("lora_config", "INT32", "-1, 3", True),
    ("guided_decoding_guide_type", "STRING", "1", True),
    ("guided_decoding_guide", "STRING", "1", True),
    ("encoder_input_features", "FP16", "-1, -1", True),
    ("encoder_output_lengths", "INT32", "1", True),
    ("decoder_input_ids", "INT32", "-1", True),
    ("decoder_input_lengths", "INT32", "1", True),
    ("cross_attention_mask", "BOOL", "-1, -1", True),
    ("skip_cross_attn_blocks", "BOOL", "1", True),
    ("draft_input_ids", "INT32", "-1", True),
    ("draft_logits", "FP32", "-1, -1", True),
    ("mrope_rotary_cos_sin", "FP32", "-1", True),
    ("mrope_position_deltas", "INT64", "1", True),
    ("context_phase_params", "UINT8", "-1", True),
    ("retention_token_range_starts", "INT32", "-1", True),
    ("retention_token_range_ends", "INT32", "-1", True),
    ("retention_token_range_priorities", "INT32", "-1", True),
    ("retention_token_range_durations_ms", "INT32", "-1", True),
    ("retention_decode_priority", "INT32", "1", True),
    ("retention_decode_duration_ms", "INT32", "1", True),
    ("lookahead_window_size", "INT32", "1", True),
    ("lookahead_ngram_size", "INT32", "1", True),
    ("lookahead_verification_set_size", "INT32", "1", True),
]


def tensorrt_llm(*, decoupled: bool, parameters: dict[str, str] | None = None, guided: bool = True) -> str:
    """``guided``: deployed with guided decoding (``guided_decoding_backend`` and its tokenizer
    info, §1.2 and §2.10); else those parameters keep their unfilled placeholders."""
    params = {
        "max_beam_width": "1",
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": "/engines/llama",
        "decoding_mode": "top_k_top_p",
        "guided_decoding_backend": "xgrammar" if guided else "${guided_decoding_backend}",
        "xgrammar_tokenizer_info_path": "/engines/llama/xgrammar_tokenizer_info.json"
        if guided
        else "${xgrammar_tokenizer_info_path}",
        **(parameters or {}),
    }
    return (
        'name: "tensorrt_llm"\nbackend: "tensorrtllm"\nmax_batch_size: 64\n'
        f"model_transaction_policy {{ decoupled: {'true' if decoupled else 'false'} }}\n"
        "dynamic_batching { default_queue_policy { max_queue_size: 0 } }\n"
        + _tensors("input", TENSORRT_LLM_INPUTS)
        + _tensors(
            "output",
            [
                ("output_ids", "INT32", "-1, -1"),
                ("sequence_length", "INT32", "-1"),
                ("context_phase_params", "UINT8", "-1"),
                ("num_input_tokens", "INT32", "1"),
                ("num_output_tokens", "INT32", "1"),
            ],
        )
        + "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in params.items())
    )


def preprocessing(tokenizer_dir: str, add_special_tokens: str | None = None) -> str:
    """§1.3, python, not decoupled."""
    params = {"tokenizer_dir": tokenizer_dir} | (
        {"add_special_tokens": add_special_tokens} if add_special_tokens is not None else {}
    )
    return (
        'name: "preprocessing"\nbackend: "python"\nmax_batch_size: 64\n'
        + _tensors(
            "input",
            [
                ("QUERY", "STRING", "1"),
                ("DECODER_QUERY", "STRING", "1", True),
                ("REQUEST_OUTPUT_LEN", "INT32", "1"),
                ("BAD_WORDS_DICT", "STRING", "-1", True),
                ("STOP_WORDS_DICT", "STRING", "-1", True),
                ("END_ID", "INT32", "1", True),
                ("PAD_ID", "INT32", "1", True),
            ],
        )
        + _tensors("output", [("INPUT_ID", "INT32", "-1"), ("REQUEST_INPUT_LEN", "INT32", "1")])
        + "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in params.items())
    )


def postprocessing(tokenizer_dir: str, skip_special_tokens: str | None = None) -> str:
    """§1.4, python, not decoupled."""
    params = {"tokenizer_dir": tokenizer_dir} | (
        {"skip_special_tokens": skip_special_tokens} if skip_special_tokens is not None else {}
    )
    return (
        'name: "postprocessing"\nbackend: "python"\nmax_batch_size: 64\n'
        + _tensors("input", [("TOKENS_BATCH", "INT32", "-1, -1"), ("SEQUENCE_LENGTH", "INT32", "-1")])
        + _tensors("output", [("OUTPUT", "STRING", "-1")])
        + "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in params.items())
    )


def bls(*, decoupled: bool, accumulate_tokens: str = "false") -> str:
    """§1.5: the ensemble's inputs and outputs plus its own, python."""
    extra = [
        ("image_input", "FP16", "-1, 3, -1, -1", True),
        ("image_url_input", "STRING", "1", True),
        ("num_draft_tokens", "INT32", "1", True),
        ("use_draft_logits", "BOOL", "1", True),
    ]
    return (
        'name: "tensorrt_llm_bls"\nbackend: "python"\nmax_batch_size: 64\n'
        f"model_transaction_policy {{ decoupled: {'true' if decoupled else 'false'} }}\n"
        + _tensors("input", ENSEMBLE_INPUTS + extra)
        + _tensors("output", ENSEMBLE_OUTPUTS)
        + f'parameters {{ key: "accumulate_tokens" value: {{ string_value: "{accumulate_tokens}" }} }}\n'
        + 'parameters { key: "tensorrt_llm_model_name" value: { string_value: "tensorrt_llm" } }\n'
    )


# §1.6, the LLM-API model as `auto_complete_config` leaves it (newest config, @0a710573).
LLMAPI_INPUTS: list[tuple[Any, ...]] = [
    ("text_input", "STRING", "-1"),
    ("streaming", "BOOL", "1", True),
    ("sampling_param_best_of", "INT32", "1", True),
    ("sampling_param_top_k", "INT32", "1", True),
    ("sampling_param_max_tokens", "INT32", "1", True),
    ("sampling_param_temperature", "FP32", "1", True),
    ("sampling_param_top_p", "FP32", "1", True),
    ("sampling_param_frequency_penalty", "FP32", "1", True),
    ("sampling_param_presence_penalty", "FP32", "1", True),
    ("sampling_param_stop", "STRING", "-1", True),
    ("sampling_param_seed", "UINT64", "1", True),
    ("sampling_param_exclude_input_from_output", "BOOL", "1", True),
    ("sampling_param_return_perf_metrics", "BOOL", "1", True),
    ("return_finish_reason", "BOOL", "1", True),
    ("return_stop_reason", "BOOL", "1", True),
    ("return_cumulative_logprob", "BOOL", "1", True),
    ("stop", "BOOL", "1", True),
    ("lora_id", "UINT64", "1", True),
    ("lora_name", "STRING", "1", True),
    ("lora_path", "STRING", "1", True),
    ("lora_ckpt_source", "STRING", "1", True),
    ("image_url", "STRING", "-1", True),
]


def llmapi(*, decoupled: bool) -> str:
    return (
        'name: "tensorrt_llm"\nbackend: "python"\nmax_batch_size: 0\n'
        f"model_transaction_policy {{ decoupled: {'true' if decoupled else 'false'} }}\n"
        + _tensors("input", LLMAPI_INPUTS)
        + _tensors(
            "output",
            [
                ("text_output", "STRING", "-1"),
                ("finish_reason", "STRING", "-1"),
                ("stop_reason", "STRING", "-1"),
                ("cumulative_logprob", "FP32", "-1"),
            ],
        )
        + 'parameters { key: "model" value: { string_value: "TinyLlama/TinyLlama-1.1B-Chat-v1.0" } }\n'
    )


def stack(tokenizer_dir: str = "/models/tokenizer", *, decoupled: bool = True, guided: bool = True) -> dict[str, Any]:
    """The configs of a deployed inflight_batcher_llm repository, by model name."""
    return {
        "ensemble": parse(ENSEMBLE),
        "preprocessing": parse(preprocessing(tokenizer_dir)),
        "tensorrt_llm": parse(tensorrt_llm(decoupled=decoupled, guided=guided)),
        "postprocessing": parse(postprocessing(tokenizer_dir)),
    }


def interfaces(configs: dict[str, Any]) -> dict[str, ModelInterface]:
    """Every model's interface, as ``TritonBackend.list_models`` reads them."""
    return {name: read_interface(config, configs) for name, config in configs.items()}


# What a contract encoded, read back.

_UNPACK = {"INT32": "i", "UINT32": "I", "INT64": "q", "UINT64": "Q", "FP32": "f", "FP16": "e", "UINT8": "B"}


def _bytes_elements(raw: bytes) -> list[bytes]:
    out, offset = [], 0
    while offset < len(raw):
        (length,) = struct.unpack_from("<I", raw, offset)
        out.append(raw[offset + 4 : offset + 4 + length])
        offset += 4 + length
    assert offset == len(raw), "a BYTES tensor ends inside an element"
    return out


def values(datatype: str, raw: bytes) -> list[Any]:
    if datatype == "BYTES":
        return _bytes_elements(raw)
    if datatype == "BOOL":
        return [bool(b) for b in raw]
    code = _UNPACK[datatype]
    return list(struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw))


def decoded(encoded: bytes) -> tuple[Any, dict[str, tuple[str, list[int], list[Any]]]]:
    """The ``ModelInferRequest`` and its tensors by name: (datatype, shape, flat values). Every
    tensor's element count must match its shape."""
    infer = service_pb2.ModelInferRequest.FromString(encoded)
    assert len(infer.inputs) == len(infer.raw_input_contents)
    names = [tensor.name for tensor in infer.inputs]
    assert len(names) == len(set(names)), f"a tensor sent twice: {names}"
    out: dict[str, tuple[str, list[int], list[Any]]] = {}
    for tensor, raw in zip(infer.inputs, infer.raw_input_contents, strict=True):
        flat = values(tensor.datatype, raw)
        shape = list(tensor.shape)
        count = 1
        for dim in shape:
            count *= dim
        assert len(flat) == count, f"{tensor.name}: {len(flat)} values for shape {shape}"
        out[tensor.name] = (tensor.datatype, shape, flat)
    return infer, out
