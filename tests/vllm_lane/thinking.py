"""A tiny model that thinks, built here (no hub download), for the lane's reasoning comparison.

tiny-llm's random weights never write ``</think>``, so the comparison needs output that does,
token for token the same on both engines. This model is a bigram machine: its one layer's
attention and MLP write nothing (``o_proj`` and ``down_proj`` are zero), so the hidden state is
the last token's embedding, and ``lm_head`` maps each token of a chain to the next one. The chain
starts at the newline that ends ``<think>\\n``, the Qwen3.5-style generation prompt of its chat
template::

    \\n → reasoning</think>hello world<|im_end|>

and with thinking off the template ends the prompt with ``</think>`` (an empty, closed block), whose
``>`` the chain continues with ``hello world``. Greedy decoding follows the chain exactly on both
sides (a margin of ~100 in the logits). Tokens off the chain have zero embeddings.

Its ``config.json`` says 2048 positions with linear RoPE scaling by 2 and ``model.json`` no
``max_model_len``: both sides derive 4096 (docs/VLLM_LANE.md). The tokenizer is tiny-llm's; head
size 64 (vLLM's CPU attention refuses smaller ones).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.vllm_lane.lane import WEIGHTS

THINK_MODEL = "tiny-think"
REASONING = "reasoning"
ANSWER = "hello world"
DERIVED_MAX_MODEL_LEN = 4096
"""2048 positions × linear RoPE factor 2, as vLLM derives it without ``max_model_len``."""

TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
)
"""Qwen3.5's shape: the generation prompt opens ``<think>``; ``enable_thinking: false`` closes an
empty block there (without the trailing blank lines Qwen3.5 adds, so the prompt's last token is
``>``, which the bigram chain tells apart from the thinking prompt's newline)."""


def build_tiny_think(where: Path) -> Path:
    """The weights, tiny-llm's tokenizer and the template above in ``where``; returns it."""
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = Tokenizer.from_file(str(WEIGHTS / "tokenizer.json"))
    thinking_end = tokenizer.encode("<|im_start|>assistant\n<think>\n", add_special_tokens=False).ids[-1]
    closed_end = tokenizer.encode("<think>\n\n</think>", add_special_tokens=False).ids[-1]
    generated = tokenizer.encode(f"{REASONING}</think>{ANSWER}", add_special_tokens=False).ids
    eos = tokenizer.token_to_id("<|im_end|>")
    chain = [thinking_end, *generated, eos]
    assert closed_end == tokenizer.token_to_id(">") and closed_end in generated, "the closed prompt joins the chain"
    assert len(set(chain[:-1])) == len(chain) - 1, "each token of the chain has one successor"
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=2048,
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
        tie_word_embeddings=False,
        bos_token_id=tokenizer.token_to_id("<s>"),
        eos_token_id=eos,
        pad_token_id=tokenizer.token_to_id("<pad>"),
        dtype="float32",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        for dim, (token, following) in enumerate(zip(chain, chain[1:], strict=False)):
            model.model.embed_tokens.weight[token, dim] = 1.0
            model.lm_head.weight[following, dim] = 10.0
    model.save_pretrained(where)
    shutil.copy(WEIGHTS / "tokenizer.json", where / "tokenizer.json")
    tokenizer_config = json.loads((WEIGHTS / "tokenizer_config.json").read_text())
    tokenizer_config.pop("chat_template", None)
    (where / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (where / "chat_template.jinja").write_text(TEMPLATE)
    config_json = json.loads((where / "config.json").read_text())
    assert config_json["max_position_embeddings"] == 2048 and "max_model_len" not in config_json
    return where
