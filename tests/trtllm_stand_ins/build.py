"""Build the stand-ins' committed assets, deterministically and offline.

Run: ``.venv/bin/python -m tests.trtllm_stand_ins.build [--out DIR]`` (default: ``assets/`` beside
this file). Running it twice gives byte-identical files: the corpus is generated here from a seed
and a fixed word list (not read from the repository, whose documents change), BPE training runs
single-threaded, and the LoRA conversion is plain arithmetic on the committed peft adapters.

``tiny-sp/``: a SentencePiece-style tokenizer, as Llama 2's tokenizer looks once converted to
Hugging Face's ``tokenizers`` format. Why this one and not tiny-llm's byte-level BPE: the upstream
defect the gateway must survive is SentencePiece's, where a word's leading space is part of its
token (``▁is``) and the decoder drops the space at the start of whatever it decodes; decoding each
streamed response on its own (what the TensorRT-LLM ensemble's postprocessing does) therefore
loses the spaces between responses. So: a Metaspace pre-tokenizer and a Metaspace decoder, BPE
merges trained on an English-like corpus, byte fallback (``<0x00>``..``<0xFF>``, so any
text encodes without ``<unk>`` and a character split across responses decodes as U+FFFD), BOS
added by the post-processor (``add_special_tokens``), and a vocabulary of exactly 1333 entries,
tiny-llm's embedding size, so every id the weights can produce decodes.

====  =========  =====================================
id    token      role
====  =========  =====================================
0     ``<pad>``  pad_token
1     ``<s>``    bos_token (added to every encoded prompt)
2     ``</s>``   eos_token (the preprocessing end id)
3     ``<unk>``  unk_token
4-259 ``<0xNN>`` byte fallback
====  =========  =====================================

``lora/<name>/``: tiny-llm's peft adapters (``triton_models/weights/lora``) in TensorRT-LLM's
request format: ``model.lora_weights.npy`` FP16 ``[1, M, W]`` (one row per module and layer: the
in-weights A ``[D, Hi]`` flattened, then the out-weights B ``[Ho, D]`` flattened with peft's
``lora_alpha / r`` folded in, zero-padded to the widest row) and ``model.lora_config.npy`` INT32
``[1, M, 3]`` (module id, layer, D). The leading 1 is the batch dimension: Triton's OpenAI
frontend ``np.load``s both files and sends the arrays as they are, so they must already carry it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

import numpy as np

from tests.trtllm_stand_ins.lora import read_peft_adapter

# Single-threaded BPE training keeps the merge order independent of scheduling; set before import.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[2]
SEED = 20261201
ASSETS = Path(__file__).resolve().parent / "assets"
PEFT_ADAPTERS = ROOT / "triton_models" / "weights" / "lora"
ADAPTER_NAMES = ("alpha", "beta")

VOCAB_SIZE = 1333
"""tiny-llm's embedding rows: the tokenizer must decode every id the weights can sample."""
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
PAD, BOS, EOS, UNK = SPECIAL_TOKENS
BYTE_TOKENS = tuple(f"<0x{value:02X}>" for value in range(256))
LIMIT_ALPHABET = 120
"""Characters the trainer keeps as base tokens (the most frequent); rarer ones use byte fallback."""

# Llama 2's chat format: the system prompt inside the first user turn, each user turn opened by
# BOS and wrapped in [INST] ... [/INST], each assistant turn closed by EOS. Written as text, so
# the BOS the template renders plus the one the preprocessing adds make two (as upstream does).
CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system_message = messages[0]['content'] -%}{%- set messages = messages[1:] -%}"
    "{%- else -%}{%- set system_message = '' -%}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{- bos_token ~ '[INST] ' -}}"
    "{%- if loop.first and system_message -%}{{- '<<SYS>>\\n' ~ system_message ~ '\\n<</SYS>>\\n\\n' -}}{%- endif -%}"
    "{{- message['content'] ~ ' [/INST]' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- ' ' ~ message['content'] ~ ' ' ~ eos_token -}}"
    "{%- else -%}"
    "{{- raise_exception('tiny-sp chat template: unsupported role ' ~ message['role']) -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
)


# The training corpus is generated here from a fixed word list, so the tokenizer never changes
# when the repository's documentation does. Common English plus the vocabulary of this project:
# enough distinct words that BPE reaches the full vocabulary with word-sized pieces ("▁request").
WORDS = """
the of and to in is that it for was on are as with be at by this have from or one had not but what all were
when we there can an your which their said if do will each about how up out them then she many some so these
would other into has more her two like him see time could no make than first been its who now people my made
over did down only way find use may water long little very after words called just where most know get through
back much before go good new write our used me man too any day same right look think also around another came
come work three word must because does part even place well such here take why things help put years different
away again off went old number great tell men say small every found still between name should home big give air
line set own under read last never us left end along while might next sound below saw something thought both few
those always looked show large often together asked house world going want school important until form food keep
children feet land side without boy once animals life enough took sometimes four head above kind began almost live
page got earth need far hand high year mother light parts country father let night following picture being study
second eyes soon times story boys since white days ever paper hard near sentence better best across during today
others however sure means knew its try told young miles sun ways thing whole hear example heard several change
answer room sea against top turned learn point city play toward five using himself usually deep learning gateway
triton server model models request requests response responses stream streaming token tokens tokenizer prompt
prompts output outputs input inputs tensor tensors batch client clients backend backends engine engines ensemble
sampling temperature penalty penalties sequence sequences length lengths cancel cancelled cancellation error errors
message messages decoder decoding encode encoded decode decoded vocabulary adapter adapters weights config
configuration parameter parameters default defaults value values string strings integer boolean number numbers
array arrays shape shapes dimension dimensions header headers status code codes health ready metrics counter gauge
latency throughput queue queued scheduler thread threads process processes memory cache cached block blocks reuse
reused prefix suffix chat template templates assistant user system function functions tool tools call calls
argument arguments schema schemas json regex grammar guided structured format formats finish reason reasons stop
stopped words word text texts space spaces piece pieces byte bytes character characters unicode utf replacement
deployment deployments container image images cluster node nodes replica replicas route routes router routing
proxy connection connections timeout deadline retry retries start started starts restart shutdown signal signals
launcher install installed package packages library libraries python version versions release releases test tests
testing unit integration fixture fixtures assert asserts check checks checked valid invalid missing unknown known
limit limits maximum minimum budget count counts usage completion completions generation generate generated
generates seed random greedy probability probabilities logit logits log logprob logprobs beam beams width
accumulate cumulative delta deltas final flag flags empty separate interface contract contracts behaviour document
documented documentation spec reference stand standin mode decoupled transaction policy instance instances group
""".split()
PUNCTUATION = (".", ",", ":", ";", "?", "!")
EXTRA_LINES = (
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '{"answer": "yes", "count": 3, "items": [1, 2, 3], "ok": true, "none": null}',
    'max_tokens = 16; top_k = 0; top_p = 0.9; seed = 42; stop = ["</s>"]',
    "Café, naïve, façade, résumé, déjà vu, Zürich, São Paulo, 東京, 日本語, 😀 🙂",
    "http://127.0.0.1:8000/v1/chat/completions returns 200, 400, 404, 429 or 500.",
)


def generate_corpus(seed: int = SEED, lines: int = 4000) -> list[str]:
    """Sentences of WORDS (seeded), with numbers, punctuation and a few fixed lines of JSON,
    URLs and non-ASCII text (rare characters fall back to bytes)."""
    rng = random.Random(seed)
    corpus = list(EXTRA_LINES) * 20
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 18))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 4096)))
        if rng.random() < 0.2:
            words[0] = words[0].capitalize()
        corpus.append(" ".join(words) + rng.choice(PUNCTUATION))
    return corpus


def _metaspace() -> tuple[object, object]:
    from tokenizers import decoders, pre_tokenizers

    pre = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    # ByteFallback first turns runs of <0xNN> into text; Metaspace then makes ▁ a space and strips
    # the one at the start of what is decoded: the SentencePiece behaviour the stand-ins reproduce.
    decoder = decoders.Sequence(
        [decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="first", split=True)]
    )
    return pre, decoder


def _merge_pair(merge: str | list[str]) -> tuple[str, str]:
    """A merge as tokenizers writes it ("a b", or ["a", "b"] in newer releases)."""
    first, second = merge.split(" ", 1) if isinstance(merge, str) else merge
    return first, second


def train_tokenizer(lines: list[str]) -> object:
    """BPE merges trained on ``lines``, then laid out with specials and bytes first (see the table)."""
    from tokenizers import AddedToken, Tokenizer, models, processors, trainers

    pre, decoder = _metaspace()
    trainer_tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    trainer_tokenizer.pre_tokenizer = pre  # type: ignore[assignment]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(BYTE_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        limit_alphabet=LIMIT_ALPHABET,
        show_progress=False,
    )
    trainer_tokenizer.train_from_iterator(lines, trainer=trainer)
    trained = json.loads(trainer_tokenizer.to_str())["model"]
    pieces = [token for token, _ in sorted(trained["vocab"].items(), key=lambda item: item[1])]
    pieces = [token for token in pieces if token not in SPECIAL_TOKENS and token not in BYTE_TOKENS]
    ordered = [*SPECIAL_TOKENS, *BYTE_TOKENS, *pieces]
    if len(ordered) != VOCAB_SIZE:
        raise SystemExit(f"the corpus gave {len(ordered)} tokens, not {VOCAB_SIZE}: it is too small")
    vocab = {token: index for index, token in enumerate(ordered)}
    merges = [_merge_pair(merge) for merge in trained["merges"]]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=UNK, byte_fallback=True, fuse_unk=True))
    tokenizer.pre_tokenizer = pre  # type: ignore[assignment]
    tokenizer.decoder = decoder  # type: ignore[assignment]
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS}:1 $B:1", special_tokens=[(BOS, vocab[BOS])]
    )
    return tokenizer


def tokenizer_config() -> dict[str, object]:
    """``tokenizer_config.json``: what ``AutoTokenizer`` and the gateway's template loader read."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": UNK,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "legacy": False,
        "model_max_length": 2048,
        "chat_template": CHAT_TEMPLATE,
    }


def write_tokenizer(out_dir: Path, lines: list[str]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(lines)
    tokenizer.save(str(out_dir / "tokenizer.json"), pretty=True)  # type: ignore[attr-defined]
    _write_json(out_dir / "tokenizer_config.json", tokenizer_config())
    _write_json(
        out_dir / "special_tokens_map.json", {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "unk_token": UNK}
    )


def convert_adapter(peft_dir: Path, out_dir: Path) -> None:
    """One peft adapter → the two TensorRT-LLM arrays, batch dimension included."""
    weights, layout = read_peft_adapter(peft_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    np.save(out_dir / "model.lora_weights.npy", weights)
    np.save(out_dir / "model.lora_config.npy", layout)


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build(out: Path = ASSETS) -> None:
    write_tokenizer(out / "tiny-sp", generate_corpus())
    for name in ADAPTER_NAMES:
        convert_adapter(PEFT_ADAPTERS / name, out / "lora" / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ASSETS, help="where to write tiny-sp/ and lora/")
    build(parser.parse_args().out)


if __name__ == "__main__":
    main()
