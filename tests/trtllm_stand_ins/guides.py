"""Guided decoding (contract §2.10): a request's guide → an llguidance grammar and a token mask.

TensorRT-LLM compiles guides with xgrammar; the stand-in uses llguidance, the reference model's
grammar engine, with the reference's rules (grammar.py there): JSON generated compact (no
whitespace between JSON tokens, so a random-weight model cannot pad its JSON until the token
budget runs out), the mask applied before any other logit processing, and a sequence that ends
as soon as the grammar can take no more tokens. The four guide types: ``json`` (any JSON object),
``json_schema``, ``regex`` and ``ebnf_grammar`` (Lark or GBNF). The token table comes from the
tokenizer of the model's ``tokenizer_dir`` parameter, with the request's end id as its end token,
so the grammar lets the sequence end exactly where it accepts.

The compile step is written here (TensorRT-LLM's guide types, the stand-in's own token table);
each sequence's matcher is the reference's ``TokenMatcher``.
"""

from __future__ import annotations

import json
from typing import Any

from tests.trtllm_stand_ins.reference import use_reference_modules
from tests.trtllm_stand_ins.request_tensors import Guide

use_reference_modules()
from grammar import TokenMatcher  # noqa: E402  (the reference model's module, by its bare name)

_JSON_OPTIONS: Any = {"whitespace_flexible": False}


class GuideError(ValueError):
    """The guide does not compile; the text says why. (A token the matcher refuses after allowing it
    is the reference's ``GrammarError``: a bug, and that request fails.)"""


def grammar_text(guide: Guide) -> str:
    import llguidance

    if guide.guide_type == "json":
        return str(llguidance.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=_JSON_OPTIONS))
    if not guide.guide:
        raise GuideError(f"guided_decoding_guide must not be empty for guide type {guide.guide_type}")
    if guide.guide_type == "json_schema":
        try:
            schema = json.loads(guide.guide)
        except json.JSONDecodeError as exc:
            raise GuideError(f"guided_decoding_guide is not a valid JSON schema: {exc}") from None
        if not isinstance(schema, dict):
            raise GuideError("guided_decoding_guide must hold a JSON schema object")
        try:
            return str(llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=_JSON_OPTIONS))
        except ValueError as exc:
            raise GuideError(f"invalid JSON schema: {exc}") from None
    if guide.guide_type == "regex":
        return str(llguidance.LLMatcher.grammar_from_regex(guide.guide))
    return str(llguidance.grammar_from("grammar", guide.guide))


class CompiledGuide:
    def __init__(self, template: Any, vocab_size: int) -> None:
        self._template = template
        self._vocab_size = vocab_size

    def matcher(self) -> TokenMatcher:
        return TokenMatcher(self._template.deep_copy(), self._vocab_size)


class GuideCompiler:
    """Token tables per end id (built once each, ~10 ms), and the compile step."""

    def __init__(self, tokenizer_json: str, vocab_size: int, default_end_id: int) -> None:
        self._json = tokenizer_json
        self._vocab_size = vocab_size
        self._default_end = default_end_id
        self._tables: dict[int, Any] = {}

    def _table(self, end_id: int) -> Any:
        if end_id not in self._tables:
            import llguidance

            self._tables[end_id] = llguidance.LLTokenizer(self._json, n_vocab=self._vocab_size, eos_token=end_id)
        return self._tables[end_id]

    def compile(self, guide: Guide, end_id: int | None) -> CompiledGuide:
        import llguidance

        text = grammar_text(guide)
        template = llguidance.LLMatcher(self._table(self._default_end if end_id is None else end_id), text, log_level=0)
        if template.is_error():
            raise GuideError(f"invalid {guide.guide_type} guide: {template.get_error().strip()}")
        return CompiledGuide(template, self._vocab_size)
