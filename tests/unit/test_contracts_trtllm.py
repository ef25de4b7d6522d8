"""The TensorRT-LLM contracts (``contracts/trtllm_*.py``), one per layout, built from real
``ModelConfig`` messages (``trtllm_configs``: the reference's §1 tables and the v0.5.0 ensemble).

Requests are read back from their serialized bytes (``ModelInferRequest.FromString``): every
tensor's name, datatype, shape and value. Responses are real ``ModelStreamInferResponse`` bytes,
built with ``tritonclient``'s serializer and numpy, read through ``triton.contract_reader`` (the
path a call takes, its shortcut included)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2
from tritonclient.utils import serialize_byte_tensor

from gateway.backend import triton
from gateway.backend.contracts import LoraAdapter, build_contract, detect_layout, llm_step_name
from gateway.backend.contracts.base import Contract
from gateway.backend.contracts.interface import read_interface
from gateway.backend.contracts.trtllm_fields import guide_of
from gateway.backend.contracts.trtllm_text import TextReader
from gateway.backend.contracts.trtllm_tokens import words_list
from gateway.backend.types import GenerationChunk, GenerationRequest, ModelInterface, TensorSpec, TokenPrompt
from gateway.errors import BackendError, InvalidRequestError
from tests.unit import trtllm_configs as cfg

U64_MAX = 2**64 - 1


# The models.


def _ensemble(decoupled: bool = True) -> tuple[ModelInterface, ModelInterface]:
    """(the 2025 ensemble, its tensorrt_llm step)."""
    models = cfg.interfaces(cfg.stack(decoupled=decoupled))
    return models["ensemble"], models["tensorrt_llm"]


def _v050(decoupled: bool) -> ModelInterface:
    configs = {
        "ensemble": cfg.parse(cfg.ENSEMBLE_V050),
        "tensorrt_llm": cfg.parse(cfg.tensorrt_llm(decoupled=decoupled)),
    }
    return read_interface(configs["ensemble"], configs)


def _bls(decoupled: bool = True, accumulate: str = "true") -> ModelInterface:
    return read_interface(cfg.parse(cfg.bls(decoupled=decoupled, accumulate_tokens=accumulate)))


def _trtllm(decoupled: bool = True, parameters: dict[str, str] | None = None) -> ModelInterface:
    return read_interface(cfg.parse(cfg.tensorrt_llm(decoupled=decoupled, parameters=parameters)))


def _llmapi(decoupled: bool = True) -> ModelInterface:
    return read_interface(cfg.parse(cfg.llmapi(decoupled=decoupled)))


def contract_of(interface: ModelInterface, step: ModelInterface | None = None, **kwargs: Any) -> Contract:
    layout = detect_layout(interface)
    assert layout is not None
    return build_contract(layout, interface, step=step, **kwargs)


def ensemble(decoupled: bool = True, **kwargs: Any) -> Contract:
    interface, step = _ensemble(decoupled)
    return contract_of(interface, step, **kwargs)


def request(
    prompt: str = "Hello", *, stream: bool = True, tokens: TokenPrompt | None = None, **sampling: Any
) -> GenerationRequest:
    return GenerationRequest("req-1", "m", prompt, {"max_tokens": 8, "n": 1, **sampling}, stream=stream, tokens=tokens)


PROMPT_IDS = TokenPrompt((1, 15, 27, 99), end_id=2, pad_id=0)


def tensors(contract: Contract, req: GenerationRequest, **kwargs: Any) -> dict[str, tuple[str, list[int], list[Any]]]:
    infer, out = cfg.decoded(contract.encode(req, **kwargs))
    assert (infer.model_name, infer.id) == (req.model, req.request_id)
    return out


def f32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


# Layouts are told by the declared interface.


def test_each_layout_is_told_by_its_interface() -> None:
    models = cfg.interfaces(cfg.stack())
    assert [detect_layout(models[n]) for n in ("ensemble", "tensorrt_llm", "preprocessing")] == [
        "ensemble",
        "tensorrt_llm",
        None,
    ]
    assert detect_layout(_v050(True)) == "ensemble"
    assert detect_layout(_bls()) == "bls"
    assert detect_layout(_llmapi()) == "llmapi"
    assert (
        detect_layout(ModelInterface({"sampling_parameters": TensorSpec("sampling_parameters", "BYTES", (1,))}))
        == "vllm"
    )
    assert llm_step_name("ensemble", models["ensemble"], models) == "tensorrt_llm"
    assert llm_step_name("bls", _bls(), models) == "tensorrt_llm"
    assert llm_step_name("bls", _bls(), {}) is None


# Requests, layout by layout.


def test_ensemble_2025_sends_every_field_as_its_declared_tensor(tmp_path: Path) -> None:
    adapters = {"sql": LoraAdapter(3, tmp_path)}
    contract = ensemble(adapters=adapters)
    req = request(
        temperature=0.5,
        top_p=0.875,
        top_k=40,
        frequency_penalty=0.25,
        presence_penalty=-0.5,
        repetition_penalty=1.125,
        length_penalty=1.5,
        min_tokens=2,
        seed=7,
        stop=["\n\n", "END"],
        bad_words=["bad"],
        structured_outputs=json.dumps({"regex": "[a-z]+"}),
        lora_name="sql",
        skip_special_tokens=False,
        include_stop_str_in_output=True,
        spaces_between_special_tokens=True,
    )
    b, f, i, u = [1, 1], "FP32", "INT32", "UINT64"
    assert tensors(contract, req) == {
        "text_input": ("BYTES", b, [b"Hello"]),
        "stream": ("BOOL", b, [True]),
        "exclude_input_in_output": ("BOOL", b, [True]),
        "return_num_input_tokens": ("BOOL", b, [True]),
        "return_num_output_tokens": ("BOOL", b, [True]),
        "max_tokens": (i, b, [8]),
        "temperature": (f, b, [0.5]),
        "top_p": (f, b, [0.875]),
        "top_k": (i, b, [40]),
        "frequency_penalty": (f, b, [0.25]),
        "presence_penalty": (f, b, [-0.5]),
        "repetition_penalty": (f, b, [1.125]),
        "length_penalty": (f, b, [1.5]),
        "min_tokens": (i, b, [2]),
        "seed": (u, b, [7]),
        "stop_words": ("BYTES", [1, 2], [b"\n\n", b"END"]),
        "bad_words": ("BYTES", b, [b"bad"]),
        "guided_decoding_guide_type": ("BYTES", b, [b"regex"]),
        "guided_decoding_guide": ("BYTES", b, [b"[a-z]+"]),
        "lora_task_id": (u, b, [3]),
    }
    assert contract.uses_lora_task(req) == 3
    assert contract.layout == "ensemble"
    assert contract.reports_prompt_tokens and contract.reports_completion_tokens


def test_ensemble_2025_sends_only_what_a_plain_request_sets() -> None:
    assert tensors(ensemble(), request(stream=False)) == {
        "text_input": ("BYTES", [1, 1], [b"Hello"]),
        "stream": ("BOOL", [1, 1], [False]),
        "exclude_input_in_output": ("BOOL", [1, 1], [True]),
        "return_num_input_tokens": ("BOOL", [1, 1], [True]),
        "return_num_output_tokens": ("BOOL", [1, 1], [True]),
        "max_tokens": ("INT32", [1, 1], [8]),
    }


def test_ensemble_v050_sends_uint32_fields_old_names_and_required_comma_separated_words() -> None:
    contract = contract_of(_v050(decoupled=True))
    assert not contract.reports_prompt_tokens and not contract.reports_completion_tokens
    req = request(top_k=-1, seed=-1, min_tokens=3, temperature=0.75, stop=["a,b", "END", "stop"])
    b = [1, 1]
    assert tensors(contract, req) == {
        "text_input": ("BYTES", b, [b"Hello"]),
        "stream": ("BOOL", b, [True]),
        "max_tokens": ("UINT32", b, [8]),
        "temperature": ("FP32", b, [0.75]),
        "top_k": ("UINT32", b, [0]),
        "min_length": ("UINT32", b, [3]),
        "random_seed": ("UINT64", b, [U64_MAX]),
        # One string; a stop string holding a comma cannot be in it (the gateway still cuts it).
        "stop_words": ("BYTES", b, [b"END,stop"]),
        "bad_words": ("BYTES", b, [b""]),  # required: sent empty
    }


def test_ensemble_v050_refuses_a_bad_word_with_a_comma_and_a_value_its_uint32_cannot_hold() -> None:
    contract = contract_of(_v050(decoupled=False))
    with pytest.raises(InvalidRequestError, match="comma-separated") as info:
        contract.encode(request(bad_words=["x,y"]))
    assert info.value.param == "bad_words"
    assert tensors(contract, request(bad_words=["x", "y"]))["bad_words"] == ("BYTES", [1, 1], [b"x,y"])
    with pytest.raises(InvalidRequestError, match="UINT32") as info:
        contract.encode(request(top_k=-2))
    assert info.value.param == "top_k"


def test_a_required_input_the_gateway_cannot_fill_is_a_backend_error() -> None:
    contract = contract_of(_v050(decoupled=False))
    with pytest.raises(BackendError, match="requires the input 'max_tokens'"):
        contract.encode(GenerationRequest("r", "m", "hi", {}))


def test_bls_sends_the_ensembles_tensors() -> None:
    contract = contract_of(_bls(), step=_trtllm())
    assert contract.layout == "bls"
    assert tensors(contract, request(top_k=5)) == {
        "text_input": ("BYTES", [1, 1], [b"Hello"]),
        "stream": ("BOOL", [1, 1], [True]),
        "exclude_input_in_output": ("BOOL", [1, 1], [True]),
        "return_num_input_tokens": ("BOOL", [1, 1], [True]),
        "return_num_output_tokens": ("BOOL", [1, 1], [True]),
        "max_tokens": ("INT32", [1, 1], [8]),
        "top_k": ("INT32", [1, 1], [5]),
    }


def test_tensorrt_llm_sends_ids_its_own_field_names_and_word_lists(tmp_path: Path) -> None:
    contract = contract_of(_trtllm(), adapters={"sql": LoraAdapter(1, tmp_path)})
    tokens = TokenPrompt((1, 15, 27, 99), end_id=2, pad_id=0, stop_words=((5, 6), (7,)), bad_words=((9,),))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = request(
        tokens=tokens,
        top_k=-1,
        seed=-1,
        top_p=0.5,
        temperature=0.75,
        length_penalty=1.25,
        min_tokens=1,
        repetition_penalty=1.5,
        presence_penalty=0.25,
        frequency_penalty=0.5,
        stop=["ab", "c"],
        stop_token_ids=[42],
        bad_words=["zz"],
        structured_outputs=json.dumps({"json": schema}),
        lora_name="sql",
    )
    sent = tensors(contract, req)
    guide = sent.pop("guided_decoding_guide")
    assert guide[:2] == ("BYTES", [1, 1]) and json.loads(guide[2][0]) == schema
    b, i, f = [1, 1], "INT32", "FP32"
    assert sent == {
        "input_ids": (i, [1, 4], [1, 15, 27, 99]),
        "input_lengths": (i, b, [4]),
        "end_id": (i, b, [2]),
        "pad_id": (i, b, [0]),
        "beam_width": (i, b, [1]),
        "streaming": ("BOOL", b, [True]),
        "exclude_input_in_output": ("BOOL", b, [True]),
        "request_output_len": (i, b, [8]),
        "runtime_top_k": (i, b, [0]),  # vLLM's -1 (off) is TensorRT-LLM's 0
        "seed": ("UINT64", b, [U64_MAX]),  # vLLM's int64 -1 as UINT64
        "runtime_top_p": (f, b, [0.5]),
        "temperature": (f, b, [0.75]),
        "len_penalty": (f, b, [1.25]),
        "min_tokens": (i, b, [1]),
        "repetition_penalty": (f, b, [1.5]),
        "presence_penalty": (f, b, [0.25]),
        "frequency_penalty": (f, b, [0.5]),
        # [batch, 2, L]: the stop strings' ids then stop_token_ids, and the cumulative offsets.
        "stop_words_list": (i, [1, 2, 4], [5, 6, 7, 42, 2, 3, 4, -1]),
        "bad_words_list": (i, [1, 2, 1], [9, 1]),
        "guided_decoding_guide_type": ("BYTES", b, [b"json_schema"]),
        "lora_task_id": ("UINT64", b, [1]),
    }


def test_tensorrt_llm_needs_the_prompts_ids() -> None:
    with pytest.raises(BackendError, match="without token ids"):
        contract_of(_trtllm()).encode(request())


def test_llmapi_sends_sampling_params_without_a_batch_dim() -> None:
    contract = contract_of(_llmapi())
    assert not contract.reports_prompt_tokens and not contract.reports_completion_tokens
    req = request(
        temperature=0.25,
        top_p=0.5,
        top_k=-1,
        frequency_penalty=0.125,
        presence_penalty=0.75,
        seed=-1,
        stop=["x", "", "yz"],
    )
    b = [1]
    assert tensors(contract, req) == {
        "text_input": ("BYTES", b, [b"Hello"]),
        "streaming": ("BOOL", b, [True]),
        "sampling_param_exclude_input_from_output": ("BOOL", b, [True]),
        "return_finish_reason": ("BOOL", b, [True]),
        "sampling_param_max_tokens": ("INT32", b, [8]),
        "sampling_param_temperature": ("FP32", b, [0.25]),
        "sampling_param_top_p": ("FP32", b, [0.5]),
        "sampling_param_top_k": ("INT32", b, [0]),
        "sampling_param_frequency_penalty": ("FP32", b, [0.125]),
        "sampling_param_presence_penalty": ("FP32", b, [0.75]),
        "sampling_param_seed": ("UINT64", b, [U64_MAX]),
        "sampling_param_stop": ("BYTES", [2], [b"x", b"yz"]),
    }


STREAM_FLAG = {"ensemble": "stream", "bls": "stream", "tensorrt_llm": "streaming", "llmapi": "streaming"}


def _layout(layout: str, decoupled: bool) -> Contract:
    if layout == "ensemble":
        return ensemble(decoupled)
    if layout == "bls":
        return contract_of(_bls(decoupled))
    if layout == "tensorrt_llm":
        return contract_of(_trtllm(decoupled))
    return contract_of(_llmapi(decoupled))


@pytest.mark.parametrize("layout", sorted(STREAM_FLAG))
@pytest.mark.parametrize(
    ("decoupled", "client_streams", "sent"),
    [(True, True, True), (False, True, False), (True, False, False), (False, False, False)],
)
def test_the_backend_is_asked_to_stream_only_when_decoupled(
    layout: str, decoupled: bool, client_streams: bool, sent: bool
) -> None:
    contract = _layout(layout, decoupled)
    req = request(stream=client_streams, tokens=PROMPT_IDS)
    assert tensors(contract, req)[STREAM_FLAG[layout]] == ("BOOL", [1, 1] if layout != "llmapi" else [1], [sent])


OFF_VALUES = {
    "ensemble": ("top_k", "seed"),
    "bls": ("top_k", "seed"),
    "tensorrt_llm": ("runtime_top_k", "seed"),
    "llmapi": ("sampling_param_top_k", "sampling_param_seed"),
}


@pytest.mark.parametrize("layout", sorted(OFF_VALUES))
def test_top_k_minus_one_is_sent_as_zero_and_seed_minus_one_as_the_uint64_max(layout: str) -> None:
    top_k, seed = OFF_VALUES[layout]
    sent = tensors(_layout(layout, True), request(tokens=PROMPT_IDS, top_k=-1, seed=-1))
    batch = [1] if layout == "llmapi" else [1, 1]
    assert sent[top_k] == ("INT32", batch, [0])
    assert sent[seed] == ("UINT64", batch, [U64_MAX])


REFUSALS = [
    ("ensemble", {"stop_token_ids": [3]}, "stop_token_ids"),
    ("ensemble", {"logprobs": 1}, "logprobs"),
    ("ensemble", {"extra_args": {"k": 1}}, "vllm_xargs"),
    ("ensemble", {"min_p": 0.1}, "min_p"),
    ("ensemble", {"ignore_eos": True}, "ignore_eos"),
    ("ensemble", {"n": 2}, "n"),
    ("v0.5.0", {"frequency_penalty": 0.5}, "frequency_penalty"),
    ("v0.5.0", {"structured_outputs": json.dumps({"json_object": True})}, "response_format"),
    ("v0.5.0", {"lora_name": "sql"}, "model"),
    ("bls", {"allowed_token_ids": [1]}, "allowed_token_ids"),
    ("tensorrt_llm", {"min_p": 0.1}, "min_p"),
    ("tensorrt_llm", {"logprobs": 2}, "logprobs"),
    ("tensorrt_llm", {"logit_bias": {"5": 1.0}}, "logit_bias"),
    ("llmapi", {"repetition_penalty": 1.1}, "repetition_penalty"),
    ("llmapi", {"min_tokens": 1}, "min_tokens"),
    ("llmapi", {"structured_outputs": json.dumps({"regex": "a"})}, "response_format"),
    ("llmapi", {"lora_name": "sql"}, "model"),
    ("llmapi", {"bad_words": ["x"]}, "bad_words"),
    ("llmapi", {"logprobs": 1}, "logprobs"),
]


@pytest.mark.parametrize(("layout", "sampling", "param"), REFUSALS, ids=[f"{r[0]}-{r[2]}" for r in REFUSALS])
def test_a_field_the_model_does_not_take_is_refused_naming_the_field_and_layout(
    layout: str, sampling: dict[str, Any], param: str, tmp_path: Path
) -> None:
    adapters = {"sql": LoraAdapter(1, tmp_path)}
    if layout == "v0.5.0":
        contract = build_contract("ensemble", _v050(True), adapters=adapters)
    else:
        contract = _layout(layout, True)
    with pytest.raises(InvalidRequestError) as info:
        contract.encode(request(tokens=PROMPT_IDS, **sampling))
    assert info.value.param == param
    name = "ensemble" if layout == "v0.5.0" else layout
    assert f"'{param}' is not supported by the model 'm' (TensorRT-LLM {name}:" in info.value.message


def test_stop_token_ids_without_a_stop_words_list_input_are_refused_but_stop_strings_are_not() -> None:
    interface = _trtllm()
    inputs = {k: v for k, v in interface.inputs.items() if k != "stop_words_list"}
    contract = contract_of(ModelInterface(inputs, interface.outputs, True, 64, "tensorrtllm"))
    tokens = TokenPrompt((1, 2), 2, 0, stop_words=((5,),))
    assert "stop_words_list" not in tensors(contract, request(tokens=tokens, stop=["x"]))
    with pytest.raises(InvalidRequestError) as info:
        contract.encode(request(tokens=tokens, stop_token_ids=[5]))
    assert info.value.param == "stop_token_ids"


@pytest.mark.parametrize(
    ("words", "matrix"),
    [
        ([(5, 6), (7,)], [[5, 6, 7], [2, 3, -1]]),
        ([(8,)], [[8], [1]]),
        ([(1, 2, 3)], [[1, 2, 3], [3, -1, -1]]),
        ([(4,), (5,), (6,)], [[4, 5, 6], [1, 2, 3]]),
        ([], [[], []]),
    ],
)
def test_words_list_is_ids_then_cumulative_offsets_padded_with_minus_one(
    words: list[tuple[int, ...]], matrix: list[list[int]]
) -> None:
    assert words_list(words) == matrix


STRUCTURED = [
    ({"json": {"type": "object"}}, "json_schema", {"type": "object"}),
    ({"json": '{"type": "string"}'}, "json_schema", {"type": "string"}),
    ({"json_object": True}, "json", ""),
    ({"json_object": True, "disable_any_whitespace": True}, "json", ""),
    ({"regex": "[0-9]{3}"}, "regex", "[0-9]{3}"),
    ({"grammar": 'root ::= "yes" | "no"'}, "ebnf_grammar", 'root ::= "yes" | "no"'),
    ({"choice": ["yes", "no.", "a|b"]}, "regex", r"(yes|no\.|a\|b)"),
]


@pytest.mark.parametrize("layout", ["ensemble", "tensorrt_llm"])
@pytest.mark.parametrize(("given", "guide_type", "guide"), STRUCTURED, ids=[str(s[0]) for s in STRUCTURED])
def test_structured_outputs_become_guided_decoding_tensors(
    layout: str, given: dict[str, Any], guide_type: str, guide: Any
) -> None:
    sent = tensors(_layout(layout, True), request(tokens=PROMPT_IDS, structured_outputs=json.dumps(given)))
    assert sent["guided_decoding_guide_type"] == ("BYTES", [1, 1], [guide_type.encode()])
    datatype, shape, [value] = sent["guided_decoding_guide"]
    assert (datatype, shape) == ("BYTES", [1, 1])
    assert (json.loads(value) if isinstance(guide, dict) else value.decode()) == guide


def test_a_structured_output_guided_decoding_cannot_enforce_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="guided decoding has no structural_tag") as info:
        ensemble().encode(request(structured_outputs=json.dumps({"structural_tag": "{}"})))
    assert info.value.param == "response_format"
    with pytest.raises(ValueError, match="no constraint"):
        guide_of(json.dumps({"disable_fallback": True}))


def test_a_guide_is_refused_where_the_engine_has_no_guided_decoding_backend() -> None:
    """A ``tensorrt_llm`` model deployed without ``guided_decoding_backend`` would ignore the
    guide (§2.10): refused, for it and for an ensemble or BLS that runs it."""
    structured = json.dumps({"regex": "a+"})
    bare = _trtllm(parameters={"guided_decoding_backend": "${guided_decoding_backend}"})
    models = cfg.interfaces(cfg.stack(guided=False))
    for contract in (
        contract_of(bare),
        contract_of(models["ensemble"], models["tensorrt_llm"]),
        contract_of(_bls(), step=models["tensorrt_llm"]),
    ):
        with pytest.raises(InvalidRequestError, match="guided_decoding_backend") as info:
            contract.encode(request(tokens=PROMPT_IDS, structured_outputs=structured))
        assert info.value.param == "response_format"
        assert "guided_decoding_guide" not in tensors(contract, request(tokens=PROMPT_IDS))
    # An ensemble whose step is not served here: its declared inputs are all there is to go by.
    assert tensors(contract_of(models["ensemble"]), request(structured_outputs=structured))[
        "guided_decoding_guide_type"
    ] == ("BYTES", [1, 1], [b"regex"])


def _adapter(directory: Path, batch_dim: bool = False) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    weights = np.array([[0.5, -1.25, 2.0, 0.0, 1.0, -0.5], [3.0, 0.25, -2.0, 1.5, 0.125, 4.0]], dtype=np.float32)
    config = np.array([[0, 3, 8], [4, 3, 8]], dtype=np.int64)
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / "model.lora_weights.npy", weights[None] if batch_dim else weights)
    np.save(directory / "model.lora_config.npy", config[None] if batch_dim else config)
    return weights, config


@pytest.mark.parametrize("layout", ["ensemble", "tensorrt_llm"])
@pytest.mark.parametrize("batch_dim", [False, True], ids=["saved-2d", "saved-with-batch-dim"])
def test_lora_sends_the_task_id_alone_or_with_its_weights(layout: str, batch_dim: bool, tmp_path: Path) -> None:
    weights, config = _adapter(tmp_path / "sql", batch_dim)
    adapters = {"sql": LoraAdapter(2, tmp_path / "sql")}
    interface, step = _ensemble() if layout == "ensemble" else (_trtllm(), None)
    contract = contract_of(interface, step, adapters=adapters)
    req = request(tokens=PROMPT_IDS, lora_name="sql")
    alone = tensors(contract, req)
    assert alone["lora_task_id"] == ("UINT64", [1, 1], [2])
    assert "lora_weights" not in alone and "lora_config" not in alone
    both = tensors(contract, req, lora_weights=True)
    assert both["lora_task_id"] == ("UINT64", [1, 1], [2])
    assert both["lora_weights"] == ("FP16", [1, 2, 6], weights.reshape(-1).tolist())
    assert both["lora_config"] == ("INT32", [1, 2, 3], config.reshape(-1).tolist())
    assert contract.uses_lora_task(req) == 2
    assert contract.uses_lora_task(request()) is None
    # Read once: the files are not read again.
    for path in (tmp_path / "sql").iterdir():
        path.unlink()
    assert tensors(contract, req, lora_weights=True)["lora_weights"] == both["lora_weights"]


def test_an_adapter_the_gateway_has_no_weights_for_is_refused_saying_so() -> None:
    """``multi_lora.json`` lists it (so planning accepts the name), but its folder is not found
    here (``describe_layout`` leaves it out of the adapters): the model does declare
    ``lora_task_id``, so the message must not say it does not."""
    with pytest.raises(InvalidRequestError) as info:
        ensemble(adapters={}).encode(request(lora_name="sql"))
    assert info.value.param == "model"
    assert "declares no lora_task_id" not in info.value.message
    assert "sql" in info.value.message


# Responses.


def _raw(datatype: str, values: list[Any], shape: list[int]) -> bytes:
    if datatype == "BYTES":
        return serialize_byte_tensor(np.array(values, dtype=np.object_).reshape(shape)).item()  # type: ignore[no-any-return]
    dtype = {"INT32": np.int32, "UINT32": np.uint32, "INT64": np.int64, "FP32": np.float32}[datatype]
    return np.array(values, dtype=dtype).reshape(shape).tobytes()


def message(*outputs: tuple[str, str, list[Any], list[int]], final: bool = False) -> bytes:
    response = service_pb2.ModelInferResponse(model_name="m", id="req-1")
    for name, datatype, values, shape in outputs:
        tensor = response.outputs.add(name=name, datatype=datatype)
        tensor.shape.extend(shape)
        response.raw_output_contents.append(_raw(datatype, values, shape))
    response.parameters["triton_final_response"].bool_param = final
    return bytes(service_pb2.ModelStreamInferResponse(infer_response=response).SerializeToString())


def text(value: bytes, shape: list[int] | None = None) -> tuple[str, str, list[Any], list[int]]:
    return ("text_output", "BYTES", [value], shape or [1, 1])


def count(name: str, value: int, datatype: str = "INT32") -> tuple[str, str, list[Any], list[int]]:
    return (name, datatype, [value], [1, 1])


def read_all(contract: Contract, req: GenerationRequest, messages: list[bytes]) -> list[GenerationChunk]:
    reader = triton.contract_reader(contract, req)
    return [reader(m) for m in messages]


def test_ensemble_stream_reads_each_text_as_a_delta_with_its_counts() -> None:
    messages = [
        message(text(b"Hel"), count("num_input_tokens", 3), count("num_output_tokens", 1)),
        message(text(b"lo"), count("num_input_tokens", 3), count("num_output_tokens", 2)),
        message(text(b"!"), count("num_input_tokens", 3), count("num_output_tokens", 1), final=True),
    ]
    assert read_all(ensemble(), request(), messages) == [
        GenerationChunk((b"Hel",), (None,), 3, (1,), None, False),
        GenerationChunk((b"lo",), (None,), 3, (2,), None, False),
        GenerationChunk((b"!",), (None,), 3, (1,), None, True),
    ]


def test_counts_read_uint32_and_sum_over_beams() -> None:
    chunk = read_all(ensemble(), request(), [message(text(b"a"), ("num_output_tokens", "UINT32", [2, 3], [1, 2]))])
    assert chunk[0].num_output_tokens == (5,)


def test_bls_with_accumulate_tokens_turns_its_cumulative_text_into_deltas() -> None:
    contract = contract_of(_bls(accumulate="true"))
    whole = ["Hel", "Hello", "Hello wor", "Hello world"]
    chunks = read_all(contract, request(), [message(text(t.encode())) for t in whole] + [message(final=True)])
    assert [c.text[0] for c in chunks] == [b"Hel", b"lo", b" wor", b"ld", b""]
    assert chunks[-1].final


def test_bls_without_accumulate_tokens_reads_deltas() -> None:
    contract = contract_of(_bls(accumulate="false"))
    chunks = read_all(contract, request(), [message(text(t)) for t in (b"Hel", b"lo")])
    assert [c.text[0] for c in chunks] == [b"Hel", b"lo"]


def test_a_cumulative_text_holds_a_trailing_replacement_character_until_it_resolves() -> None:
    contract = contract_of(_bls(accumulate="true"))
    euro = "€".encode()
    partial = b"caf\xef\xbf\xbd"  # what a decode of the first bytes of a character gives
    chunks = read_all(
        contract,
        request(),
        [message(text(b"caf")), message(text(partial)), message(text(partial)), message(text(b"caf" + euro + b"!"))],
    )
    assert [c.text[0] for c in chunks] == [b"caf", b"", b"", euro + b"!"]
    # A replacement character that is the text's own comes out when the stream ends on it.
    chunks = read_all(contract, request(), [message(text(b"a")), message(text(b"a\xef\xbf\xbd"), final=True)])
    assert b"".join(c.text[0] for c in chunks) == b"a\xef\xbf\xbd"


def _cumulative(data: bytes, cuts: list[int]) -> list[bytes]:
    """What a cumulative decoder sends at each cut: the bytes so far, an unfinished character as
    U+FFFD (as the tokenizer's decode gives it)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[:p].decode("utf-8", "replace").encode() for p in points]


@settings(max_examples=150, deadline=None)
@given(
    whole=st.text(alphabet=st.sampled_from(list("ab é€🙂\ufffd\n")), max_size=20),
    cuts=st.lists(st.integers(0, 100), max_size=10),
    empties=st.lists(st.integers(0, 12), max_size=3),
)
def test_any_split_of_cumulative_prefixes_yields_deltas_that_join_to_the_last_text(
    whole: str, cuts: list[int], empties: list[int]
) -> None:
    data = whole.encode()
    sent = _cumulative(data, cuts)
    for at in sorted(empties, reverse=True):  # empty responses anywhere say nothing new
        sent.insert(min(at, len(sent)), b"")
    reader = TextReader(cumulative=True, strip=None, subtract_prompt=False)
    outputs = (("text_output", "BYTES"),)
    deltas = [reader(outputs, [struct.pack("<I", len(t)) + t], False).text[0] for t in sent]
    deltas.append(reader(outputs, [struct.pack("<I", len(data)) + data], True).text[0])
    assert b"".join(deltas) == data
    offset = 0
    for delta in deltas:
        delta.decode()  # whole characters only
        # Each delta is the final text at its place: no U+FFFD of a character not yet whole.
        assert data[offset : offset + len(delta)] == delta
        offset += len(delta)


def test_a_whole_answer_that_echoes_the_prompt_has_it_cut_off() -> None:
    contract = contract_of(_v050(decoupled=False))  # no exclude_input_in_output before v0.16
    req = request("Hello world", stream=True)
    assert read_all(contract, req, [message(text(b"Hello world, and more", [1, 1, 1]), final=True)])[0].text == (
        b", and more",
    )
    # The prompt the tokenizer gave back differently stays (nothing to cut safely).
    assert read_all(contract, req, [message(text(b"hello world!"), final=True)])[0].text == (b"hello world!",)


def test_a_model_that_says_it_excludes_the_prompt_has_nothing_cut() -> None:
    interface = _v050(decoupled=False)
    step = _trtllm(False, {"exclude_input_in_output": "true"})
    contract = build_contract("ensemble", interface, step=step)
    req = request("Hello")
    assert read_all(contract, req, [message(text(b"Hello again"), final=True)])[0].text == (b"Hello again",)


def test_num_output_tokens_of_a_whole_echoed_answer_leave_the_prompt_out() -> None:
    base = _ensemble(decoupled=False)[0]
    inputs = {k: v for k, v in base.inputs.items() if k != "exclude_input_in_output"}
    contract = build_contract("ensemble", ModelInterface(inputs, base.outputs, False, 64, "ensemble"))
    req = request("one two")
    sent = tensors(contract, req)
    assert "exclude_input_in_output" not in sent and sent["stream"][2] == [False]
    [chunk] = read_all(
        contract,
        req,
        [message(text(b"one two three"), count("num_input_tokens", 4), count("num_output_tokens", 6), final=True)],
    )
    assert chunk == GenerationChunk((b" three",), (None,), 4, (2,), None, True)


def ids(
    name: str, values: list[int], shape: list[int], datatype: str = "INT32"
) -> tuple[str, str, list[Any], list[int]]:
    return (name, datatype, values, shape)


def test_token_reader_reads_output_ids_cut_to_sequence_length() -> None:
    contract = contract_of(_trtllm())
    req = request(tokens=PROMPT_IDS)
    chunks = read_all(
        contract,
        req,
        [
            message(ids("output_ids", [5, 6, 7], [1, 1, 3]), ids("sequence_length", [3], [1, 1])),
            message(ids("output_ids", [8, -1, -1], [1, 1, 3]), ids("sequence_length", [1], [1, 1])),
            message(ids("output_ids", [9, 10], [1, 1, 2]), ids("sequence_length", [2], [1, 1]), final=True),
        ],
    )
    assert chunks == [
        GenerationChunk((b"",), (None,), 4, (3,), None, False, ((5, 6, 7),)),
        GenerationChunk((b"",), (None,), 4, (1,), None, False, ((8,),)),
        GenerationChunk((b"",), (None,), 4, (2,), None, True, ((9, 10),)),
    ]


def test_token_reader_drops_an_echoed_prompt_from_a_whole_answer() -> None:
    interface = _trtllm(decoupled=False)
    old = ModelInterface(
        {k: v for k, v in interface.inputs.items() if k != "exclude_input_in_output"},
        interface.outputs,
        False,
        64,
        "tensorrtllm",
    )
    req = request(stream=False, tokens=PROMPT_IDS)
    echoed = message(
        ids("output_ids", [1, 15, 27, 99, 5, 6, -1], [1, 1, 7]), ids("sequence_length", [6], [1, 1]), final=True
    )
    assert read_all(contract_of(old), req, [echoed])[0] == GenerationChunk(
        (b"",), (None,), 4, (2,), None, True, ((5, 6),)
    )
    # The model's exclude_input_in_output parameter says it does not echo: nothing is dropped.
    excluded = ModelInterface(old.inputs, old.outputs, False, 64, "tensorrtllm", {"exclude_input_in_output": "true"})
    plain = message(ids("output_ids", [5, 6], [1, 1, 2]), ids("sequence_length", [2], [1, 1]), final=True)
    assert read_all(contract_of(excluded), req, [plain])[0].token_ids == ((5, 6),)


def test_token_reader_reads_an_empty_final_response_as_no_ids() -> None:
    [chunk] = read_all(contract_of(_trtllm()), request(tokens=PROMPT_IDS), [message(final=True)])
    assert chunk == GenerationChunk((b"",), (None,), 4, None, None, True, ((),))


def test_token_reader_refuses_output_ids_of_another_type() -> None:
    with pytest.raises(BackendError, match="INT64"):
        read_all(
            contract_of(_trtllm()), request(tokens=PROMPT_IDS), [message(ids("output_ids", [5], [1, 1, 1], "INT64"))]
        )


@pytest.mark.parametrize(
    ("reason", "read"),
    [(b"stop", "stop"), (b"length", "length"), (b"cancelled", "abort"), (b"timeout", "abort"), (b"None", None)],
)
def test_llmapi_finish_reason_maps_to_vllms(reason: bytes, read: str | None) -> None:
    [chunk] = read_all(
        contract_of(_llmapi()), request(), [message(text(b"Hi", [1]), ("finish_reason", "BYTES", [reason], [1]))]
    )
    assert chunk.finish_reason == (read,)
    assert chunk.text == (b"Hi",)


def test_llmapi_stream_is_cumulative_and_its_finish_reason_ends_the_text() -> None:
    contract = contract_of(_llmapi())
    steps = [(b"Hi", b"None"), (b"Hi th", b"None"), (b"Hi th\xef\xbf\xbd", b"None"), (b"Hi th\xef\xbf\xbd", b"length")]
    chunks = read_all(
        contract, request(), [message(text(t, [1]), ("finish_reason", "BYTES", [r], [1])) for t, r in steps]
    )
    assert [(c.text[0], c.finish_reason[0]) for c in chunks] == [
        (b"Hi", None),
        (b" th", None),
        (b"", None),
        (b"\xef\xbf\xbd", "length"),
    ]
    assert all(c.num_output_tokens is None and c.num_input_tokens is None for c in chunks)


def test_f32_values_survive_the_wire() -> None:
    sent = tensors(ensemble(), request(temperature=0.1))
    assert sent["temperature"][2] == [f32(0.1)]
