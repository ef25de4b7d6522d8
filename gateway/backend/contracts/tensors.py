"""Triton's wire encoding of tensors in ``ModelInferRequest``/``ModelInferResponse`` raw contents,
shared by every backend contract (the vLLM backend's, each TensorRT-LLM layout's)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from gateway.backend.types import GenerationChunk
from gateway.errors import BackendError

_UINT32 = struct.Struct("<I")
_unpack_uint32 = _UINT32.unpack_from

Outputs = tuple[tuple[str, str], ...]
"""A response's output descriptors, in the order of its raw contents: (name, datatype)."""

ReadRaws = Callable[[Sequence[bytes], bool], GenerationChunk]
"""The reading of one layout's responses: raw contents, final → a chunk."""


def describe_outputs(response: Any) -> Outputs:
    """The output descriptors of a protobuf ``ModelInferResponse``."""
    return tuple((output.name, output.datatype) for output in response.outputs)


def add_tensor(request: Any, name: str, datatype: str, shape: list[int], raw: bytes) -> None:
    """Append one input tensor with its raw bytes to a ``ModelInferRequest``."""
    tensor = request.inputs.add()
    tensor.name = name
    tensor.datatype = datatype
    tensor.shape.extend(shape)
    request.raw_input_contents.append(raw)


def pack_bytes(value: bytes) -> bytes:
    """One BYTES element: a uint32 little-endian length, then the bytes."""
    return _UINT32.pack(len(value)) + value


def split_bytes(raw: bytes) -> tuple[bytes, ...]:
    """The elements of a raw BYTES tensor."""
    end = len(raw)
    if end >= 4 and _unpack_uint32(raw)[0] == end - 4:
        return (raw[4:],)  # the common case (per token): one sequence
    out: list[bytes] = []
    offset = 0
    while offset < end:
        (length,) = _unpack_uint32(raw, offset)
        offset += 4
        out.append(raw[offset : offset + length])
        offset += length
    return tuple(out)


_NUMBER_FORMATS = {"UINT32": ("I", 4), "INT32": ("i", 4), "UINT64": ("Q", 8), "INT64": ("q", 8), "FP32": ("f", 4)}
ONE_NUMBER = {datatype: (struct.Struct("<" + code).unpack, size) for datatype, (code, size) in _NUMBER_FORMATS.items()}
"""A datatype's unpacker of one number, and its size: the usual one-element output's shortcut."""


def unpack_numbers(raw: bytes, datatype: str) -> tuple[int, ...] | tuple[float, ...]:
    """A raw numeric tensor's values (little-endian, as Triton sends them)."""
    try:
        unpack, size = ONE_NUMBER[datatype]
    except KeyError:
        raise BackendError(f"unexpected datatype {datatype} from backend") from None
    if len(raw) == size:
        return unpack(raw)
    return struct.unpack(f"<{len(raw) // size}{_NUMBER_FORMATS[datatype][0]}", raw)
