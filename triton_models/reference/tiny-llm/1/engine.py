"""The loaded model: tokenizer, Llama weights, LoRA adapters, and one forward step.

Why one object owns all of it: peft's active adapter is global state of the model (``set_adapter``
and the enable/disable switch change module attributes that every forward reads). The engine is
therefore used by exactly one thread, the scheduler's, which switches the adapter right before each
forward step; no two forwards ever overlap, so no forward can run under another request's adapter.
"""

from __future__ import annotations

import inspect
import logging
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from grammar import CompiledGrammar, build_grammar_tokenizer
from model_config import ModelConfig
from structured_outputs import StructuredOutputs
from token_bytes import build_token_bytes

logger = logging.getLogger(__name__)

_BASE = "<base>"  # adapter marker for "no LoRA"; cannot clash with a name (multi_lora keys are free text)


@dataclass(frozen=True)
class StepResult:
    """The logits of the last position and the cache to pass to the next step."""

    logits: torch.Tensor
    cache: Any


class TinyLlmEngine:
    """Loads everything at construction (fails at model load, not on the first request)."""

    def __init__(self, config: ModelConfig) -> None:
        from transformers import AutoTokenizer, LlamaForCausalLM

        torch.set_num_threads(config.num_threads)
        self.config = config
        self.tokenizer = AutoTokenizer.from_pretrained(str(config.model_dir))
        model = LlamaForCausalLM.from_pretrained(str(config.model_dir), dtype=torch.float32).eval()
        self.vocab_size: int = int(model.config.vocab_size)
        max_positions = int(model.config.max_position_embeddings)
        if config.max_model_len > max_positions:
            raise ValueError(
                f"max_model_len {config.max_model_len} exceeds the model's max_position_embeddings {max_positions}"
            )
        eos = model.config.eos_token_id
        self.eos_token_ids: frozenset[int] = frozenset(eos if isinstance(eos, list) else [eos])
        self.special_token_ids: frozenset[int] = frozenset(self.tokenizer.all_special_ids)
        self.token_bytes: list[bytes] = build_token_bytes(
            self.tokenizer.get_vocab(),
            [token.content for token in self.tokenizer.added_tokens_decoder.values()],
            self.vocab_size,
        )
        self._grammar_tokenizer = build_grammar_tokenizer(self.tokenizer, self.vocab_size, self.eos_token_ids)
        self._peft_model = self._load_adapters(model) if config.adapters else None
        # The LlamaForCausalLM carries the injected LoRA layers: calling it directly skips peft's
        # wrapper overhead while still honouring the active adapter.
        self._model = model
        self._cache_argument = cache_argument(model)
        self._last_logits_only = last_logits_argument(model)
        self._active_adapter: str | None = None
        self._set_adapter(None)

    @property
    def adapter_names(self) -> tuple[str, ...]:
        return tuple(self.config.adapters)

    def _load_adapters(self, model: Any) -> Any:
        from peft import PeftModel

        names = list(self.config.adapters)
        with warnings.catch_warnings():
            # peft 0.21 probes a deprecated transformers attribute while wrapping; harmless noise.
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            first = names[0]
            peft_model = PeftModel.from_pretrained(model, str(self.config.adapters[first]), adapter_name=first)
            for name in names[1:]:
                peft_model.load_adapter(str(self.config.adapters[name]), adapter_name=name)
        peft_model.eval()
        logger.info("loaded LoRA adapters %s", names)
        return peft_model

    def _set_adapter(self, name: str | None) -> None:
        """Make ``name`` (None: the base model) the active adapter; a no-op when it already is."""
        wanted = name or _BASE
        if self._peft_model is None or wanted == self._active_adapter:
            self._active_adapter = wanted
            return
        if name is None:
            self._peft_model.base_model.disable_adapter_layers()
        else:
            if self._active_adapter in (None, _BASE):
                self._peft_model.base_model.enable_adapter_layers()
            self._peft_model.base_model.set_adapter(name)
        self._active_adapter = wanted

    def tokenize(self, prompt: str) -> list[int]:
        """Prompt ids, special tokens in the text parsed as such; no BOS is added (ChatML style)."""
        return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])

    def encode_text(self, text: str) -> list[int]:
        """Tokens of a piece of text inside a prompt or output (no special tokens added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def compile_grammar(self, constraint: StructuredOutputs) -> CompiledGrammar:
        """A request's structured-output constraint, compiled for this tokenizer (raises GrammarError)."""
        return CompiledGrammar(constraint, self._grammar_tokenizer, self.vocab_size)

    def decode_token(self, token_id: int) -> str:
        """One token as text for logprobs' ``decoded_token`` (a split character becomes U+FFFD)."""
        return self.token_bytes[token_id].decode("utf-8", errors="replace")

    @torch.inference_mode()
    def forward(self, input_ids: list[int], cache: Any, adapter: str | None) -> StepResult:
        """Run ``input_ids`` (the prompt, or the last token) after ``cache``; return next-token logits."""
        self._set_adapter(adapter)
        ids = torch.tensor([input_ids], dtype=torch.long)
        name = self._cache_argument
        # Only the last position's logits: a prompt of 50,000 tokens would otherwise compute (and
        # hold) 50,000 x vocabulary of them.
        last = {self._last_logits_only: 1} if self._last_logits_only is not None else {}
        output = self._model(input_ids=ids, use_cache=True, **{name: cache}, **last)
        return StepResult(logits=output.logits[0, -1].float().clone(), cache=getattr(output, name))


def cache_argument(model: Any) -> str:
    """What this transformers calls the key-value cache, in ``forward``'s arguments and in its
    output: ``cache`` from 5.2x on (``past_key_values`` is deprecated there, a FutureWarning per
    step, and goes in 5.40), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def last_logits_argument(model: Any) -> str | None:
    """What this transformers calls the number of last positions to compute logits for:
    ``logits_to_keep`` from 4.50 on, ``num_logits_to_keep`` before (None: computes them all)."""
    parameters = inspect.signature(model.forward).parameters
    return next((name for name in ("logits_to_keep", "num_logits_to_keep") if name in parameters), None)
