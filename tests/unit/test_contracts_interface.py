"""A model's declared interface read from Triton's ``ModelConfig`` (``contracts/interface.py``):
wire types, dims, optional, decoupled (an ensemble's through its steps), parameters; the shapes a
request's tensors get from it, and numbers packed in the declared type or refused."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from gateway.backend.contracts.interface import TensorValueError, add_declared, add_matrix, pack_numbers, read_interface
from gateway.backend.types import ModelInterface, TensorSpec
from tests.unit import trtllm_configs as cfg


def test_read_interface_gives_wire_types_dims_and_optional() -> None:
    interface = read_interface(cfg.parse(cfg.ENSEMBLE))
    inputs = interface.inputs
    assert inputs["text_input"] == TensorSpec("text_input", "BYTES", (1,), False)  # TYPE_STRING
    assert inputs["max_tokens"] == TensorSpec("max_tokens", "INT32", (1,), False)
    assert inputs["stop_words"] == TensorSpec("stop_words", "BYTES", (-1,), True)
    assert inputs["seed"] == TensorSpec("seed", "UINT64", (1,), True)
    assert inputs["top_p"] == TensorSpec("top_p", "FP32", (1,), True)
    assert inputs["stream"] == TensorSpec("stream", "BOOL", (1,), True)
    assert inputs["prompt_embedding_table"] == TensorSpec("prompt_embedding_table", "FP16", (-1, -1), True)
    assert inputs["lora_config"] == TensorSpec("lora_config", "INT32", (-1, 3), True)
    assert list(inputs) == [row[0] for row in cfg.ENSEMBLE_INPUTS]  # the config's order
    assert interface.outputs["text_output"] == TensorSpec("text_output", "BYTES", (-1,), False)
    assert interface.outputs["generation_logits"].dims == (-1, -1, -1)
    assert interface.max_batch_size == 64
    assert interface.platform == "ensemble"


def test_read_interface_reads_backend_parameters_and_the_transaction_policy() -> None:
    interface = read_interface(cfg.parse(cfg.tensorrt_llm(decoupled=True, parameters={"tokenizer_dir": "/tok"})))
    assert interface.platform == "tensorrtllm"  # the backend wins over the (empty) platform
    assert interface.decoupled is True
    assert interface.steps == ()
    assert interface.parameters["tokenizer_dir"] == "/tok"
    assert interface.parameters["gpt_model_type"] == "inflight_fused_batching"
    assert interface.inputs["stop_words_list"] == TensorSpec("stop_words_list", "INT32", (2, -1), True)
    assert interface.inputs["input_lengths"].optional is False
    assert read_interface(cfg.parse(cfg.tensorrt_llm(decoupled=False))).decoupled is False


def test_read_interface_of_a_model_without_a_policy_is_not_decoupled() -> None:
    interface = read_interface(cfg.parse(cfg.preprocessing("/tok")))
    assert interface.decoupled is False
    assert interface.platform == "python"
    assert interface.parameters == {"tokenizer_dir": "/tok"}


def test_read_interface_of_the_llmapi_model_has_no_batch_dim() -> None:
    interface = read_interface(cfg.parse(cfg.llmapi(decoupled=True)))
    assert interface.max_batch_size == 0
    assert interface.decoupled is True
    assert interface.inputs["text_input"].dims == (-1,)


def test_an_ensemble_lists_its_steps_in_order_and_is_decoupled_through_one() -> None:
    configs = cfg.stack(decoupled=True)
    alone = read_interface(configs["ensemble"])
    assert alone.steps == ("preprocessing", "tensorrt_llm", "postprocessing")
    assert alone.decoupled is False, "an ensemble has no transaction policy of its own"
    assert read_interface(configs["ensemble"], configs).decoupled is True
    assert read_interface(configs["ensemble"], cfg.stack(decoupled=False)).decoupled is False


def test_an_ensemble_whose_steps_are_not_served_is_not_decoupled() -> None:
    configs = {"ensemble": cfg.parse(cfg.ENSEMBLE), "preprocessing": cfg.parse(cfg.preprocessing("/tok"))}
    assert read_interface(configs["ensemble"], configs).decoupled is False


def _spec(dims: tuple[int, ...]) -> TensorSpec:
    return TensorSpec("x", "INT32", dims, True)


@pytest.mark.parametrize(
    ("dims", "count", "batched", "unbatched"),
    [
        ((1,), 1, [1, 1], [1]),
        ((-1,), 1, [1, 1], [1]),
        ((-1,), 3, [1, 3], [3]),
        ((), 1, [1, 1], [1]),
        ((-1, -1), 1, [1, 1, 1], [1, 1]),
        ((-1, -1), 4, [1, 1, 4], [1, 4]),
        ((2, -1), 1, [1, 2, 1], [2, 1]),
    ],
)
def test_shape_adds_the_batch_dim_only_when_the_model_batches(
    dims: tuple[int, ...], count: int, batched: list[int], unbatched: list[int]
) -> None:
    assert ModelInterface(max_batch_size=8).shape(_spec(dims), count) == batched
    assert ModelInterface(max_batch_size=0).shape(_spec(dims), count) == unbatched


RANGES = {
    "INT8": (-(2**7), 2**7 - 1, "b"),
    "UINT8": (0, 2**8 - 1, "B"),
    "INT16": (-(2**15), 2**15 - 1, "h"),
    "UINT16": (0, 2**16 - 1, "H"),
    "INT32": (-(2**31), 2**31 - 1, "i"),
    "UINT32": (0, 2**32 - 1, "I"),
    "INT64": (-(2**63), 2**63 - 1, "q"),
    "UINT64": (0, 2**64 - 1, "Q"),
}


@pytest.mark.parametrize("datatype", sorted(RANGES))
def test_pack_numbers_takes_the_whole_range_and_refuses_past_it(datatype: str) -> None:
    low, high, code = RANGES[datatype]
    assert pack_numbers(datatype, [low, high]) == struct.pack(f"<2{code}", low, high)
    for outside in (low - 1, high + 1):
        with pytest.raises(TensorValueError, match=datatype):
            pack_numbers(datatype, [outside])


def test_pack_numbers_uint32_refuses_minus_one() -> None:
    with pytest.raises(TensorValueError, match="-1 does not fit the model's UINT32"):
        pack_numbers("UINT32", [-1])


@settings(max_examples=60, deadline=None)
@given(datatype=st.sampled_from(sorted(RANGES)), data=st.data())
def test_pack_numbers_round_trips_every_value_in_range(datatype: str, data: st.DataObject) -> None:
    low, high, code = RANGES[datatype]
    numbers = data.draw(st.lists(st.integers(low, high), max_size=5))
    assert list(struct.unpack(f"<{len(numbers)}{code}", pack_numbers(datatype, numbers))) == numbers


def test_pack_numbers_floats_bools_and_types_it_cannot_pack() -> None:
    assert pack_numbers("FP32", [0.5, 2]) == struct.pack("<2f", 0.5, 2.0)
    assert pack_numbers("FP64", [0.1]) == struct.pack("<d", 0.1)
    assert pack_numbers("FP16", [1.5]) == struct.pack("<e", 1.5)
    assert pack_numbers("BOOL", [True, False, 1]) == b"\x01\x00\x01"
    with pytest.raises(TensorValueError, match="BYTES"):
        pack_numbers("BYTES", [1])


def test_add_declared_types_and_shapes_a_tensor_as_declared() -> None:
    interface = read_interface(cfg.parse(cfg.ENSEMBLE_V050))
    infer = service_pb2.ModelInferRequest()
    add_declared(infer, interface, "max_tokens", [16])
    add_declared(infer, interface, "stop_words", ["a", b"b"])
    _, tensors = cfg.decoded(infer.SerializeToString())
    assert tensors == {"max_tokens": ("UINT32", [1, 1], [16]), "stop_words": ("BYTES", [1, 2], [b"a", b"b"])}


def test_add_matrix_is_one_batch_item_of_rows() -> None:
    batched = read_interface(cfg.parse(cfg.tensorrt_llm(decoupled=False)))
    infer = service_pb2.ModelInferRequest()
    add_matrix(infer, batched, "stop_words_list", [[5, 6, 7], [2, 3, -1]])
    add_matrix(infer, batched, "bad_words_list", [])
    _, tensors = cfg.decoded(infer.SerializeToString())
    assert tensors["stop_words_list"] == ("INT32", [1, 2, 3], [5, 6, 7, 2, 3, -1])
    assert tensors["bad_words_list"] == ("INT32", [1, 0, 0], [])
