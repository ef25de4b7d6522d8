"""A model's declared interface, read from Triton's ``ModelConfig``, and tensors built from it.

Every tensor a TensorRT-LLM request carries is built here from what the model declares: its
type (ensembles released before 2023-11 declare ``max_tokens`` as UINT32, later ones INT32, and
Triton refuses a request whose type differs), its shape (a leading batch dimension when
``max_batch_size`` > 0; the LLM-API model has none), and whether the model may stream at all
(its transaction policy, or for an ensemble its steps': an ensemble has no policy of its own).
The priority levels its dynamic batcher declares say whether a request's band can reach Triton's
queue as the request's ``priority`` parameter (``add_priority``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from tritonclient.grpc import model_config_pb2

from gateway.backend.contracts.tensors import add_tensor, pack_bytes
from gateway.backend.types import ModelInterface, TensorSpec

_PACKERS: dict[str, tuple[str, float, float]] = {
    # datatype: (struct code, lowest, highest)
    "INT32": ("i", -(2**31), 2**31 - 1),
    "UINT32": ("I", 0, 2**32 - 1),
    "INT64": ("q", -(2**63), 2**63 - 1),
    "UINT64": ("Q", 0, 2**64 - 1),
    "INT16": ("h", -(2**15), 2**15 - 1),
    "UINT16": ("H", 0, 2**16 - 1),
    "INT8": ("b", -(2**7), 2**7 - 1),
    "UINT8": ("B", 0, 2**8 - 1),
    "FP32": ("f", float("-inf"), float("inf")),
    "FP64": ("d", float("-inf"), float("inf")),
    "FP16": ("e", float("-inf"), float("inf")),
}


class TensorValueError(ValueError):
    """A value the declared type cannot hold (a negative number for a UINT32 input)."""


def _tensor_spec(tensor: Any) -> TensorSpec:
    name = model_config_pb2.DataType.Name(tensor.data_type)
    datatype = "BYTES" if name == "TYPE_STRING" else name.removeprefix("TYPE_")
    return TensorSpec(
        tensor.name, datatype, tuple(int(d) for d in tensor.dims), bool(getattr(tensor, "optional", False))
    )


def read_interface(config: Any, configs: Mapping[str, Any] | None = None) -> ModelInterface:
    """The interface of one ``ModelConfig``; ``configs`` (every ready model's, by name) lets an
    ensemble be decoupled when one of its steps is."""
    steps = tuple(step.model_name for step in config.ensemble_scheduling.step)
    decoupled = bool(config.model_transaction_policy.decoupled)
    levels = int(config.dynamic_batching.priority_levels)
    if steps and configs is not None:
        decoupled = decoupled or any(bool(configs[s].model_transaction_policy.decoupled) for s in steps if s in configs)
        # Triton lets any priority through an ensemble, to each step's own queue.
        levels = max((int(configs[s].dynamic_batching.priority_levels) for s in steps if s in configs), default=0)
    return ModelInterface(
        inputs={t.name: _tensor_spec(t) for t in config.input},
        outputs={t.name: _tensor_spec(t) for t in config.output},
        decoupled=decoupled,
        max_batch_size=int(config.max_batch_size),
        platform=config.backend or config.platform,
        parameters={key: value.string_value for key, value in config.parameters.items()},
        steps=steps,
        priority_levels=levels,
        default_priority_level=int(config.dynamic_batching.default_priority_level),
    )


def add_priority(infer: Any, priority: int) -> None:
    """Set the request's Triton ``priority`` parameter (a level, 1 the most urgent) when it has
    one: Triton's queue for the model orders waiting requests by it. 0 sends nothing (the model's
    default level)."""
    if priority:
        infer.parameters["priority"].uint64_param = priority


def pack_numbers(datatype: str, values: Sequence[float | int | bool]) -> bytes:
    """Numbers as a raw tensor of ``datatype``; out of its range is a ``TensorValueError``."""
    if datatype == "BOOL":
        return bytes(1 if v else 0 for v in values)
    try:
        code, low, high = _PACKERS[datatype]
    except KeyError:
        raise TensorValueError(f"cannot send numbers as {datatype}") from None
    if code in "fde":
        return struct.pack(f"<{len(values)}{code}", *(float(v) for v in values))
    numbers = [int(v) for v in values]
    for number in numbers:
        if not low <= number <= high:
            raise TensorValueError(f"{number} does not fit the model's {datatype}")
    return struct.pack(f"<{len(numbers)}{code}", *numbers)


def add_declared(infer: Any, interface: ModelInterface, name: str, values: Sequence[Any]) -> None:
    """Append input ``name`` holding ``values`` (one batch item), typed and shaped as declared.
    Strings and bytes go to BYTES inputs; anything else is a number."""
    spec = interface.inputs[name]
    if spec.datatype == "BYTES":
        raw = b"".join(pack_bytes(v.encode("utf-8") if isinstance(v, str) else v) for v in values)
    else:
        raw = pack_numbers(spec.datatype, values)
    add_tensor(infer, name, spec.datatype, interface.shape(spec, len(values)), raw)


def add_matrix(infer: Any, interface: ModelInterface, name: str, rows: Sequence[Sequence[Any]]) -> None:
    """Append a 2-D input (``stop_words_list``' [2, L], LoRA's [M, K]) for one batch item."""
    spec = interface.inputs[name]
    flat = [v for row in rows for v in row]
    raw = pack_numbers(spec.datatype, flat)
    shape = [len(rows), len(rows[0]) if rows else 0]
    add_tensor(infer, name, spec.datatype, [1, *shape] if interface.max_batch_size > 0 else shape, raw)
