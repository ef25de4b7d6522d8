"""LoRA in TensorRT-LLM's request format: packing, unpacking, and the per-instance task cache.

The format (contract §2.12): ``lora_config`` rows ``(module_id, layer_idx, D)`` and ``lora_weights``
rows that hold, for the same module and layer, the in-weights A ``[D, Hi]`` flattened and then the
out-weights B ``[Ho, D]`` flattened (rows zero-padded to one width). There is no alpha: the scale
is folded into B when an adapter is converted. ``Hi``/``Ho`` follow from the module and the model's
shape, which is why unpacking needs ``ModelShape``.

Why a cache with a tiny default size (``stand_in_lora_cache_tasks``, default 1): TensorRT-LLM keeps
adapters in a PEFT cache keyed by task id, and a client must send the weights again once its task
was evicted. With room for one task, switching between two adapters evicts, so a client's
"weights once, then only the id" logic and its recovery from the cache-miss error get exercised.
Pure numpy: unit-tested without torch or Triton.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

MODULE_IDS: dict[str, int] = {
    "attn_qkv": 0,
    "attn_q": 1,
    "attn_k": 2,
    "attn_v": 3,
    "attn_dense": 4,
    "mlp_h_to_4h": 5,
    "mlp_4h_to_h": 6,
    "mlp_gate": 7,
}
MODULE_NAMES = {value: key for key, value in MODULE_IDS.items()}

# Hugging Face Llama projection → TensorRT-LLM module (TensorRT-LLM calls the gated MLP's
# gate_proj "h_to_4h" and its up_proj "gate").
HF_MODULES: dict[str, str] = {
    "q_proj": "attn_q",
    "k_proj": "attn_k",
    "v_proj": "attn_v",
    "o_proj": "attn_dense",
    "gate_proj": "mlp_h_to_4h",
    "up_proj": "mlp_gate",
    "down_proj": "mlp_4h_to_h",
}
_PEFT_KEY = re.compile(r"layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\.(?P<module>\w+)\.lora_(?P<which>[AB])\.weight$")


class LoraError(ValueError):
    """The adapter tensors do not fit the model, or the task is unknown; the text is the reason."""


def read_peft_adapter(directory: Path) -> tuple[NDArray[Any], NDArray[Any]]:
    """A peft adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``) → the
    request tensors with their batch dimension: weights FP16 ``[1, M, W]``, config INT32 ``[1, M, 3]``."""
    from safetensors.numpy import load_file

    config = json.loads((directory / "adapter_config.json").read_text(encoding="utf-8"))
    rank = int(config["r"])
    scale = float(config["lora_alpha"]) / (rank**0.5 if config.get("use_rslora") else rank)
    weights, layout = pack_adapter(load_file(str(directory / "adapter_model.safetensors")), scale)
    return weights[np.newaxis], layout[np.newaxis]


def pack_adapter(tensors: Mapping[str, NDArray[Any]], scale: float) -> tuple[NDArray[Any], NDArray[Any]]:
    """peft ``lora_A``/``lora_B`` tensors → (weights FP16 ``[M, W]``, config INT32 ``[M, 3]``),
    rows ordered by layer, then module id."""
    pairs: dict[tuple[int, int], dict[str, NDArray[Any]]] = {}
    for key, value in tensors.items():
        match = _PEFT_KEY.search(key)
        if match is None or match["module"] not in HF_MODULES:
            raise LoraError(f"unsupported adapter tensor {key!r}")
        module_id = MODULE_IDS[HF_MODULES[match["module"]]]
        pairs.setdefault((int(match["layer"]), module_id), {})[match["which"]] = np.asarray(value, dtype=np.float32)
    rows, layout = [], []
    for (layer, module_id), pair in sorted(pairs.items()):
        a, b = pair["A"], pair["B"] * scale
        rank = a.shape[0]
        rows.append(np.concatenate([a.reshape(-1), b.reshape(-1)]))
        layout.append((module_id, layer, rank))
    width = max(row.size for row in rows)
    weights = np.zeros((len(rows), width), dtype=np.float16)
    for index, row in enumerate(rows):
        weights[index, : row.size] = row
    return weights, np.asarray(layout, dtype=np.int32)


@dataclass(frozen=True)
class ModelShape:
    """The sizes that give each module's Hi and Ho."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    q_size: int
    kv_size: int

    def sizes(self, module_id: int) -> tuple[int, int]:
        """(Hi, Ho) of a module."""
        hidden, q, kv, inter = self.hidden_size, self.q_size, self.kv_size, self.intermediate_size
        return {
            0: (hidden, q + 2 * kv),
            1: (hidden, q),
            2: (hidden, kv),
            3: (hidden, kv),
            4: (q, hidden),
            5: (hidden, inter),
            6: (inter, hidden),
            7: (hidden, inter),
        }[module_id]


@dataclass(frozen=True)
class LoraDelta:
    """One module of one layer: ``y += (x @ a.T) @ b.T``."""

    module_id: int
    layer: int
    a: NDArray[Any]
    b: NDArray[Any]


def unpack_adapter(weights: NDArray[Any], config: NDArray[Any], shape: ModelShape, max_rank: int) -> list[LoraDelta]:
    """The request's ``lora_weights``/``lora_config`` (batch dim already removed) → deltas, checked."""
    if weights.ndim != 2 or config.ndim != 2 or config.shape[1] != 3:
        raise LoraError(
            f"Expected lora weights of shape [M, W] and lora config of shape [M, 3], got {list(weights.shape)} "
            f"and {list(config.shape)}"
        )
    if weights.shape[0] != config.shape[0]:
        raise LoraError(
            f"Expected the same number of lora weight rows ({weights.shape[0]}) as lora config rows ({config.shape[0]})"
        )
    deltas = []
    for row, (module_id, layer, rank) in zip(weights, config.tolist(), strict=True):
        if module_id not in MODULE_NAMES:
            raise LoraError(f"lora config: unknown module id {module_id} (known: {sorted(MODULE_NAMES)})")
        if not 0 <= layer < shape.num_layers:
            raise LoraError(f"lora config: layer {layer} out of range, the model has {shape.num_layers} layers")
        if not 1 <= rank <= max_rank:
            raise LoraError(f"lora config: adapter size {rank} must be in [1, {max_rank}]")
        size_in, size_out = shape.sizes(module_id)
        needed = rank * size_in + size_out * rank
        if row.size < needed:
            raise LoraError(
                f"lora weights: module {MODULE_NAMES[module_id]} of layer {layer} with adapter size {rank} needs "
                f"{needed} values per row, the row has {row.size}"
            )
        values = row.astype(np.float32)
        a = values[: rank * size_in].reshape(rank, size_in)
        b = values[rank * size_in : needed].reshape(size_out, rank)
        deltas.append(LoraDelta(module_id=module_id, layer=layer, a=a, b=b))
    return deltas


def cache_miss_message(task_id: int) -> str:
    return f"LoRA task {task_id} not found in cache. Please send LoRA weights with request"


CACHE_FULL_MESSAGE = "Cache is full. There are no done tasks to evict"

Adapter = TypeVar("Adapter")


class LoraCache(Generic[Adapter]):
    """Task id → adapter (whatever the engine made of its deltas), least recently used evicted
    first; tasks in use are never evicted. Not thread-safe: only the scheduler thread uses it."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("the LoRA cache needs room for at least one task")
        self.capacity = capacity
        self._tasks: OrderedDict[int, Adapter] = OrderedDict()
        self._in_use: dict[int, int] = {}

    def __contains__(self, task_id: int) -> bool:
        return task_id in self._tasks

    @property
    def task_ids(self) -> list[int]:
        """Cached task ids, least recently used first."""
        return list(self._tasks)

    def acquire(self, task_id: int, adapter: Adapter | None) -> Adapter:
        """The adapter of ``task_id`` for a starting request (store ``adapter`` first when given);
        pair with ``release``. Raises LoraError with TensorRT-LLM's texts on a miss or a full cache."""
        if adapter is None:
            if task_id not in self._tasks:
                raise LoraError(cache_miss_message(task_id))
        elif task_id not in self._tasks:
            self._make_room()
        if adapter is not None:
            self._tasks[task_id] = adapter
        self._tasks.move_to_end(task_id)
        self._in_use[task_id] = self._in_use.get(task_id, 0) + 1
        return self._tasks[task_id]

    def release(self, task_id: int) -> None:
        left = self._in_use.get(task_id, 0) - 1
        if left > 0:
            self._in_use[task_id] = left
        else:
            self._in_use.pop(task_id, None)

    def _make_room(self) -> None:
        while len(self._tasks) >= self.capacity:
            victim = next((task for task in self._tasks if task not in self._in_use), None)
            if victim is None:
                raise LoraError(CACHE_FULL_MESSAGE)
            del self._tasks[victim]
