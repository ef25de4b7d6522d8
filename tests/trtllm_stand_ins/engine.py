"""tiny-llm's weights as the stand-ins' engine: a Llama forward step in plain torch, with LoRA
from request tensors.

Why not ``transformers.LlamaForCausalLM``, which the reference model uses: importing transformers
costs about 5 s of CPU per Python-backend stub on this machine, and the two generating stand-ins
load side by side on two cores, so the stack would take twice as long to start. This is the same
computation (RMSNorm, rotary embeddings, grouped-query attention with a KV cache, SiLU-gated MLP,
the tied LM head) read from the same ``config.json`` and ``model.safetensors``; ``tests/unit``
checks that its logits match transformers' and that its LoRA matches peft's.

LoRA comes from TensorRT-LLM's request format: each adapter's rows are turned back into A and B
(lora.py) and added to the projection they adapt, ``y += (x @ A.T) @ B.T``. Engine state is read
by one thread only (the scheduler's), so adapters never leak between requests.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from tests.trtllm_stand_ins.lora import LoraDelta, ModelShape

# TensorRT-LLM module id → the Llama projections it adapts; a fused qkv row is split over three.
_TARGETS: dict[int, tuple[str, ...]] = {
    0: ("q_proj", "k_proj", "v_proj"),
    1: ("q_proj",),
    2: ("k_proj",),
    3: ("v_proj",),
    4: ("o_proj",),
    5: ("gate_proj",),
    6: ("down_proj",),
    7: ("up_proj",),
}


@dataclass(frozen=True)
class _Delta:
    a: torch.Tensor
    b: torch.Tensor
    start: int
    end: int


Adapter = dict[tuple[int, str], list[_Delta]]
"""A prepared adapter: (layer, projection) → what to add to its output."""


@dataclass
class KvCache:
    """Keys and values of every layer so far, ``[positions, kv_heads, head_dim]`` each."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[0]) if self.keys else 0


@dataclass(frozen=True)
class StepResult:
    logits: torch.Tensor
    """Next-token logits (float32, vocab-sized)."""
    cache: KvCache
    all_logits: torch.Tensor | None = None
    """Every position's logits, when asked for (the prompt's context logits)."""


class StandInEngine:
    """Loads at construction, so a broken weights directory fails the model load."""

    def __init__(self, model_dir: Path, num_threads: int = 1) -> None:
        from safetensors.torch import load_file

        torch.set_num_threads(num_threads)
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        self.vocab_size = int(config["vocab_size"])
        self.max_positions = int(config["max_position_embeddings"])
        self.num_heads = int(config["num_attention_heads"])
        self.num_kv_heads = int(config.get("num_key_value_heads", self.num_heads))
        self.head_dim = int(config.get("head_dim") or config["hidden_size"] // self.num_heads)
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        rope = config.get("rope_parameters") or {}
        theta = float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"only default rotary embeddings are implemented, not {rope.get('rope_type')}")
        self.shape = ModelShape(
            hidden_size=int(config["hidden_size"]),
            intermediate_size=int(config["intermediate_size"]),
            num_layers=int(config["num_hidden_layers"]),
            q_size=self.num_heads * self.head_dim,
            kv_size=self.num_kv_heads * self.head_dim,
        )
        self._weights = {
            name: tensor.float() for name, tensor in load_file(str(model_dir / "model.safetensors")).items()
        }
        self._lm_head = self._weights.get("lm_head.weight", self._weights["model.embed_tokens.weight"])
        self._inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))

    def prepare_adapter(self, deltas: list[LoraDelta]) -> Adapter:
        """Request rows → torch tensors per projection (once per task, when its weights arrive)."""
        adapter: Adapter = {}
        q, kv = self.shape.q_size, self.shape.kv_size
        for delta in deltas:
            a, b = torch.from_numpy(np.ascontiguousarray(delta.a)), torch.from_numpy(np.ascontiguousarray(delta.b))
            paths = _TARGETS[delta.module_id]
            bounds = [(0, q), (q, q + kv), (q + kv, q + 2 * kv)] if len(paths) == 3 else [(0, b.shape[0])]
            for path, (start, end) in zip(paths, bounds, strict=True):
                adapter.setdefault((delta.layer, path), []).append(_Delta(a, b, start, end))
        return adapter

    def _linear(self, x: torch.Tensor, layer: int, group: str, name: str, adapter: Adapter) -> torch.Tensor:
        out = x @ self._weights[f"model.layers.{layer}.{group}.{name}.weight"].T
        for delta in adapter.get((layer, name), ()):
            out = out + ((x @ delta.a.T) @ delta.b.T)[..., delta.start : delta.end]
        return out

    def _norm(self, x: torch.Tensor, weight: str) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self._weights[weight] * (x * torch.rsqrt(variance + self.eps))

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _attention(
        self, x: torch.Tensor, layer: int, cache: KvCache, rope: tuple[torch.Tensor, torch.Tensor], adapter: Adapter
    ) -> torch.Tensor:
        length = x.shape[0]
        q = self._linear(x, layer, "self_attn", "q_proj", adapter).view(length, self.num_heads, self.head_dim)
        k = self._linear(x, layer, "self_attn", "k_proj", adapter).view(length, self.num_kv_heads, self.head_dim)
        v = self._linear(x, layer, "self_attn", "v_proj", adapter).view(length, self.num_kv_heads, self.head_dim)
        cos, sin = rope
        q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        if layer < len(cache.keys):
            k, v = torch.cat([cache.keys[layer], k]), torch.cat([cache.values[layer], v])
            cache.keys[layer], cache.values[layer] = k, v
        else:
            cache.keys.append(k)
            cache.values.append(v)
        groups = self.num_heads // self.num_kv_heads
        keys = k.repeat_interleave(groups, dim=1).transpose(0, 1)  # [heads, total, dim]
        values = v.repeat_interleave(groups, dim=1).transpose(0, 1)
        scores = (q.transpose(0, 1) @ keys.transpose(1, 2)) / math.sqrt(self.head_dim)  # [heads, length, total]
        total = keys.shape[1]
        past = total - length
        causal = torch.arange(total)[None, :] > (past + torch.arange(length))[:, None]
        scores = scores.masked_fill(causal, -math.inf)
        attended = torch.softmax(scores, dim=-1) @ values  # [heads, length, dim]
        return self._linear(attended.transpose(0, 1).reshape(length, -1), layer, "self_attn", "o_proj", adapter)

    def _mlp(self, x: torch.Tensor, layer: int, adapter: Adapter) -> torch.Tensor:
        gate = self._linear(x, layer, "mlp", "gate_proj", adapter)
        up = self._linear(x, layer, "mlp", "up_proj", adapter)
        return self._linear(torch.nn.functional.silu(gate) * up, layer, "mlp", "down_proj", adapter)

    @torch.inference_mode()
    def forward(
        self, input_ids: list[int], cache: KvCache | None, adapter: Adapter | None, all_logits: bool = False
    ) -> StepResult:
        """Run ``input_ids`` (the prompt, or the last token) after ``cache`` under ``adapter``."""
        cache = cache if cache is not None else KvCache()
        adapter = adapter or {}
        past = cache.length
        positions = torch.arange(past, past + len(input_ids), dtype=torch.float32)
        freqs = positions[:, None] * self._inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)[:, None, :]  # [length, 1, dim]: broadcast over heads
        rope = (angles.cos(), angles.sin())
        hidden = self._weights["model.embed_tokens.weight"][torch.tensor(input_ids, dtype=torch.long)]
        for layer in range(self.shape.num_layers):
            prefix = f"model.layers.{layer}."
            hidden = hidden + self._attention(
                self._norm(hidden, prefix + "input_layernorm.weight"), layer, cache, rope, adapter
            )
            hidden = hidden + self._mlp(self._norm(hidden, prefix + "post_attention_layernorm.weight"), layer, adapter)
        hidden = self._norm(hidden if all_logits else hidden[-1:], "model.norm.weight")
        logits = hidden @ self._lm_head.T
        return StepResult(logits=logits[-1].clone(), cache=cache, all_logits=logits if all_logits else None)
