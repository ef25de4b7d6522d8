"""Build the tiny test LLM and its two LoRA adapters, deterministically, with no downloads.

Why this exists: the gateway's tests need a real causal LM behind a real Triton, but nothing may be
fetched from a model hub and the files get committed. So this script makes everything from a seed:

* a byte-level BPE tokenizer trained with ``tokenizers`` on a corpus generated here (it mixes ASCII,
  accented Latin, CJK and emoji so that tokens regularly split multi-byte UTF-8 characters, which is
  exactly what the gateway's incremental decoder must survive);
* a randomly initialised Llama-family model (``LlamaForCausalLM``, 2 layers, hidden 128, head_dim 64,
  GQA with one KV head) saved with ``save_pretrained`` as safetensors;
* a ChatML-like chat template, saved both to ``chat_template.jinja`` (what transformers 5 writes) and
  into ``tokenizer_config.json`` (where older loaders and the gateway's fallback look);
* ``generation_config.json`` listing both end-of-sequence ids;
* two peft LoRA adapters (``alpha`` and ``beta``, r=8 on q_proj/v_proj) with non-zero weights, so the
  greedy continuation differs between base, alpha and beta.

Special tokens (ids are fixed because they are the first entries of the vocabulary):

====  ==================  ==========================================================
id    token               role
====  ==================  ==========================================================
0     ``<pad>``           padding (never generated on purpose)
1     ``<s>``             bos_token; NOT added to prompts (ChatML style, like Qwen)
2     ``</s>``            secondary end of sequence (in generation_config eos ids)
3     ``<|im_start|>``    opens a chat turn
4     ``<|im_end|>``      eos_token: closes a chat turn and ends generation
====  ==================  ==========================================================

Run: ``python triton_models/build_tiny_llm.py [--out DIR]`` (default ``triton_models/weights``).
Running it twice gives byte-identical files (fixed seeds, single-threaded training).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import warnings
from pathlib import Path

# Single-threaded BPE training keeps merge order independent of scheduling; set before import.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SEED = 20240611
VOCAB_SIZE = 1536
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
PAD_TOKEN, BOS_TOKEN, EOS2_TOKEN, IM_START, IM_END = SPECIAL_TOKENS
EOS_TOKEN = IM_END
ADAPTERS = {"alpha": SEED + 1, "beta": SEED + 2}
LORA_RANK = 8
LORA_TARGETS = ["q_proj", "v_proj"]
CONTEXT_LENGTH = 131072
"""Positions the model takes (RoPE: a number in the config, not in the weights): room for a coding
agent's first request (Claude Code's is ~50,000 tokens in this small vocabulary) beside the
32,000 tokens it asks for. Attention runs through torch's SDPA, whose CPU kernel keeps memory linear
in the prompt; the time of a prefill grows with its square (~8 s for 30,000 tokens on one core)."""

# ChatML-like, with tools the way Qwen 2.5 renders them (Hermes format): with ``tools``, a system
# turn lists them in <tools></tools> and asks for <tool_call>{"name", "arguments"}</tool_call>
# (the first system message's content goes first in that turn); an assistant turn with
# ``tool_calls`` renders each call in that markup, arguments as JSON objects. Roles outside the five
# known ones raise (HF's ``raise_exception`` global); content must be a string (None is rendered as
# empty). Without tools or tool calls it renders what it always rendered.
CHAT_TEMPLATE = (
    "{%- if tools -%}\n"
    "{{- '<|im_start|>system\\n' -}}\n"
    "{%- if messages and messages[0]['role'] == 'system' -%}\n"
    "{{- (messages[0]['content'] or '') ~ '\\n\\n' -}}\n"
    "{%- endif -%}\n"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' -}}\n"
    "{%- for tool in tools -%}\n"
    "{{- '\\n' ~ (tool | tojson) -}}\n"
    "{%- endfor -%}\n"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' -}}\n'
    "{%- endif -%}\n"
    "{%- for message in messages -%}\n"
    "{%- if message['role'] not in ['system', 'developer', 'user', 'assistant', 'tool'] -%}\n"
    "{{- raise_exception('tiny-llm chat template: unsupported role ' ~ message['role']) -}}\n"
    "{%- endif -%}\n"
    "{%- if tools and loop.first and message['role'] == 'system' -%}\n"
    "{%- elif message['role'] == 'assistant' and message['tool_calls'] -%}\n"
    "{{- '<|im_start|>assistant\\n' ~ (message['content'] or '') -}}\n"
    "{%- for call in message['tool_calls'] -%}\n"
    "{%- set function = call['function'] if call['function'] is defined else call -%}\n"
    "{{- '\\n<tool_call>\\n{\"name\": ' ~ (function['name'] | tojson) ~ ', \"arguments\": ' "
    "~ (function['arguments'] | tojson) ~ '}\\n</tool_call>' -}}\n"
    "{%- endfor -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- else -%}\n"
    "{{- '<|im_start|>' ~ message['role'] ~ '\\n' ~ (message['content'] or '') ~ '<|im_end|>\\n' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}\n"
)

_WORDS = (
    "the a an of to and in is it that for on with as was at by be this from or have not are but "
    "model token stream triton gateway request response server client model python backend text "
    "hello world quick brown fox jumps over lazy dog tiny llama byte pair encoding chat assistant "
    "user system developer tool answer question number value error cancel stop length sample seed "
    "temperature probability window batch queue thread lock cache layer head vector matrix weight "
    "rain river mountain city garden coffee music window forest ocean light shadow winter summer"
).split()
_UNICODE_WORDS = (
    "café naïve façade über straße crème brûlée mañana jalapeño smörgåsbord Ærø ĳssel "
    "日本語 中文 文字 東京 北京 한국어 서울 Ελληνικά Москва привет мир שלום مرحبا "
    "😀 🚀 🎉 👍🏽 🇫🇷 ❤️ ∑ ∞ ≈ € £ ¥ — … «» ✓"
).split()


def generate_corpus(seed: int = SEED, lines: int = 3000) -> list[str]:
    """A deterministic pseudo-text corpus; enough variety for a 1.5k-token BPE, no downloads."""
    rng = random.Random(seed)
    corpus: list[str] = []
    roles = ["system", "developer", "user", "assistant", "tool"]
    for index in range(lines):
        words = [
            rng.choice(_UNICODE_WORDS) if rng.random() < 0.15 else rng.choice(_WORDS) for _ in range(rng.randint(4, 18))
        ]
        sentence = " ".join(words)
        if rng.random() < 0.3:
            sentence = sentence.capitalize() + rng.choice([".", "!", "?", ",", ":", ";"])
        if rng.random() < 0.2:
            sentence += f" {rng.randint(0, 99999)}"
        if index % 7 == 0:
            role = rng.choice(roles)
            sentence = f"{IM_START}{role}\n{sentence}{IM_END}\n"
        if index % 11 == 0:
            sentence = f'{{"key": "{rng.choice(_WORDS)}", "n": {rng.randint(0, 999)}}}'
        corpus.append(sentence)
    return corpus


def build_tokenizer(out_dir: Path) -> PreTrainedTokenizerFast:  # noqa: F821 - lazy import
    """Train the byte-level BPE and save it with the chat template in both places."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    # add_prefix_space=False: decoding is then plain concatenation of token bytes, which the model
    # relies on to stream raw bytes per token.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(generate_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START, EOS2_TOKEN],
        model_max_length=CONTEXT_LENGTH,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    # transformers 5 writes its new "TokenizersBackend"; the older name loads in 4.x and 5.x alike.
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    (out_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return fast


def build_model(out_dir: Path, tokenizer: PreTrainedTokenizerFast) -> None:  # noqa: F821
    """Random-init the Llama model from the seed and save it (fp32 safetensors, tied embeddings)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    eos_ids = [tokenizer.convert_tokens_to_ids(token) for token in (EOS_TOKEN, EOS2_TOKEN)]
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=CONTEXT_LENGTH,
        # Larger than the usual 0.02 so the next-token distribution is peaked enough for top_p,
        # top_k and min_p to visibly matter.
        initializer_range=0.08,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids(BOS_TOKEN),
        eos_token_id=eos_ids,
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD_TOKEN),
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(str(out_dir))
    GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=eos_ids,
        pad_token_id=config.pad_token_id,
        do_sample=False,
    ).save_pretrained(str(out_dir))


def build_adapters(model_dir: Path, lora_dir: Path) -> None:
    """Two LoRA adapters with random (non-zero) A and B, one seed each."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    for name, seed in ADAPTERS.items():
        base = LlamaForCausalLM.from_pretrained(str(model_dir))
        config = LoraConfig(
            r=LORA_RANK,
            lora_alpha=2 * LORA_RANK,
            target_modules=LORA_TARGETS,
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
            # False keeps nn.Linear's random init for B as well: the adapter changes outputs at once.
            init_lora_weights=False,
        )
        torch.manual_seed(seed)
        with warnings.catch_warnings():
            # peft 0.21 probes a deprecated transformers attribute while wrapping; harmless noise.
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            peft_model = get_peft_model(base, config)
        target = lora_dir / name
        peft_model.save_pretrained(str(target))
        # peft writes a model card full of placeholders; it is noise in the repository.
        (target / "README.md").unlink(missing_ok=True)
        adapter_config_path = target / "adapter_config.json"
        adapter_config = json.loads(adapter_config_path.read_text())
        # An absolute build path would leak into committed files; the base is found via model.json.
        adapter_config["base_model_name_or_path"] = "tiny-llm"
        # peft stores target_modules from a set: its order follows PYTHONHASHSEED. Sort for stable bytes.
        adapter_config["target_modules"] = sorted(adapter_config["target_modules"])
        adapter_config_path.write_text(json.dumps(adapter_config, indent=2, sort_keys=True) + "\n")


def build(out: Path) -> None:
    """Build everything into ``out`` (``tiny-llm/`` and ``lora/{alpha,beta}/``), replacing old files."""
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    model_dir = out / "tiny-llm"
    lora_dir = out / "lora"
    for stale in (model_dir, lora_dir):
        if stale.exists():
            shutil.rmtree(stale)
    model_dir.mkdir(parents=True)
    tokenizer = build_tokenizer(model_dir)
    build_model(model_dir, tokenizer)
    build_adapters(model_dir, lora_dir)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "weights",
        help="output directory (default: triton_models/weights next to this script)",
    )
    args = parser.parse_args(argv)
    build(args.out)
    print(f"built tiny-llm and adapters {sorted(ADAPTERS)} into {args.out}")  # noqa: T201 - CLI output


if __name__ == "__main__":
    main()
