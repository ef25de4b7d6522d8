"""The incremental detokenizer (``core/detokenize.py``) on real tokenizers: tiny-llm's byte-level
BPE (characters split across tokens), SentencePiece-style ones built here (a Metaspace decoder
drops the leading space of a decode's first piece; a Llama-style byte-fallback decoder spells rare
characters in byte tokens), and the TensorRT-LLM stand-ins' ``tiny-sp``. Whatever the split of ids
into responses, the text is what decoding the whole sequence at once gives, after the prompt's
tail, and no delta shows a U+FFFD the whole decode does not have at that place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from gateway.core.detokenize import PROMPT_CONTEXT, IncrementalDetokenizer

ROOT = Path(__file__).resolve().parents[2]
BYTE_LEVEL = Tokenizer.from_file(str(ROOT / "triton_models" / "weights" / "tiny-llm" / "tokenizer.json"))

SENTENCES = [
    "Deep learning is a field of machine learning.",
    "The gateway streams tokens from Triton to every client.",
    "Café, déjà vu and a naïve façade: 日本語のテキスト 🙂.",
    "Hello world, hello there! Is it learning or streaming?",
]


def sentencepiece(byte_fallback: bool = False) -> Tokenizer:
    """A small SentencePiece-style BPE: Metaspace pre-tokenizer, and a Metaspace decoder (or
    Llama's byte-fallback decoder chain, whose last step strips the first space likewise)."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=byte_fallback))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    if byte_fallback:
        tokenizer.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
    else:
        tokenizer.decoder = decoders.Metaspace()
    special = ["<unk>", "<s>", "</s>"] + ([f"<0x{b:02X}>" for b in range(256)] if byte_fallback else [])
    trainer = trainers.BpeTrainer(vocab_size=120 + len(special), special_tokens=special, show_progress=False)
    tokenizer.train_from_iterator(SENTENCES, trainer)
    return tokenizer


METASPACE = sentencepiece()
BYTE_FALLBACK = sentencepiece(byte_fallback=True)

TINY_SP_FILE = ROOT / "tests" / "trtllm_stand_ins" / "assets" / "tiny-sp" / "tokenizer.json"
TINY_SP = Tokenizer.from_file(str(TINY_SP_FILE)) if TINY_SP_FILE.is_file() else BYTE_FALLBACK
"""The TensorRT-LLM stand-ins' SentencePiece-style tokenizer (byte fallback, Metaspace decoder)."""
needs_tiny_sp = pytest.mark.skipif(not TINY_SP_FILE.is_file(), reason="no tests/trtllm_stand_ins/assets/tiny-sp")


def _not_bytes(tokenizer: Tokenizer) -> list[int]:
    """Ids other than byte-fallback tokens (``<0xNN>``): see the byte-fallback test for why."""
    spelled = {i for token, i in tokenizer.get_vocab().items() if len(token) == 6 and token.startswith("<0x")}
    return sorted(set(range(tokenizer.get_vocab_size())) - spelled)


def run(tokenizer: Any, prompt_ids: list[int], ids: list[int], cuts: list[int], skip: bool) -> tuple[list[str], str]:
    """The deltas (finish()'s last) of ``ids`` fed in the pieces ``cuts`` make, and what they
    must join to."""
    tail = prompt_ids[-PROMPT_CONTEXT:]
    before = tokenizer.decode(tail, skip_special_tokens=skip)
    whole = tokenizer.decode(tail + ids, skip_special_tokens=skip)
    assert whole.startswith(before)
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_ids, skip_special_tokens=skip)
    points = sorted({0, len(ids), *(c for c in cuts if c <= len(ids))})
    deltas = [detokenizer.feed(ids[a:b]) for a, b in zip(points, points[1:], strict=False)]
    deltas.append(detokenizer.finish())
    return deltas, whole[len(before) :]


def check(deltas: list[str], expected: str) -> None:
    assert "".join(deltas) == expected
    offset = 0
    for delta in deltas:
        for at, char in enumerate(delta):
            if char == "\ufffd":
                assert expected[offset + at] == "\ufffd", (deltas, expected)
        offset += len(delta)


prompts = st.text(max_size=24)
cut_lists = st.lists(st.integers(0, 24), max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompt=prompts,
    ids=st.lists(st.integers(0, BYTE_LEVEL.get_vocab_size() - 1), max_size=24),
    cuts=cut_lists,
    skip=st.booleans(),
)
def test_byte_level_any_ids_any_split_join_to_the_whole_decode(
    prompt: str, ids: list[int], cuts: list[int], skip: bool
) -> None:
    prompt_ids = BYTE_LEVEL.encode(prompt).ids
    check(*run(BYTE_LEVEL, prompt_ids, ids, cuts, skip))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompt=prompts,
    ids=st.lists(st.integers(0, METASPACE.get_vocab_size() - 1), max_size=24),
    cuts=cut_lists,
    skip=st.booleans(),
)
def test_sentencepiece_any_ids_any_split_join_to_the_whole_decode(
    prompt: str, ids: list[int], cuts: list[int], skip: bool
) -> None:
    prompt_ids = METASPACE.encode(prompt).ids
    check(*run(METASPACE, prompt_ids, ids, cuts, skip))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompt=prompts,
    answer=st.text(alphabet=st.sampled_from(list("ab lerning€🙂日本é\n")), max_size=16),
    cuts=cut_lists,
)
def test_byte_fallback_any_text_any_split_join_to_the_whole_decode(prompt: str, answer: str, cuts: list[int]) -> None:
    """Generated text rather than arbitrary ids: a byte-fallback decoder turns a *run* of byte
    tokens that is not valid UTF-8 into one U+FFFD per byte, so an invalid run is not decoded
    piecewise the way it is at once (no window can fix that; vLLM's neither)."""
    ids = BYTE_FALLBACK.encode(answer, add_special_tokens=False).ids
    check(*run(BYTE_FALLBACK, BYTE_FALLBACK.encode(prompt).ids, ids, cuts, True))


@needs_tiny_sp
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompt=prompts,
    ids=st.lists(st.sampled_from(_not_bytes(TINY_SP)), max_size=24),
    answer=st.text(max_size=16),
    cuts=cut_lists,
    skip=st.booleans(),
)
def test_tiny_sp_any_ids_or_text_any_split_join_to_the_whole_decode(
    prompt: str, ids: list[int], answer: str, cuts: list[int], skip: bool
) -> None:
    prompt_ids = TINY_SP.encode(prompt).ids
    check(*run(TINY_SP, prompt_ids, ids, cuts, skip))
    check(*run(TINY_SP, prompt_ids, TINY_SP.encode(answer, add_special_tokens=False).ids, cuts, skip))


def test_sentencepiece_keeps_the_space_each_response_decoded_alone_loses() -> None:
    prompt = METASPACE.encode("Deep learning").ids
    answer = METASPACE.encode("is a field of machine learning", add_special_tokens=False).ids
    alone = "".join(METASPACE.decode([i]) for i in answer)
    assert " " not in alone, "the failure the detokenizer exists for: TensorRT-LLM's postprocessing per response"
    detokenizer = IncrementalDetokenizer(METASPACE, prompt)
    assert "".join(detokenizer.feed([i]) for i in answer) + detokenizer.finish() == " is a field of machine learning"


def test_a_character_split_across_responses_comes_whole_and_once() -> None:
    smile = BYTE_LEVEL.encode("🙂", add_special_tokens=False).ids
    assert len(smile) == 3 and all(BYTE_LEVEL.decode([i]) == "\ufffd" for i in smile)
    detokenizer = IncrementalDetokenizer(BYTE_LEVEL, BYTE_LEVEL.encode("I am").ids)
    assert [detokenizer.feed([i]) for i in smile] == ["", "", "🙂"]
    assert detokenizer.finish() == ""


def test_finish_gives_an_unfinished_character_as_a_replacement_character() -> None:
    smile = BYTE_LEVEL.encode("🙂", add_special_tokens=False).ids
    detokenizer = IncrementalDetokenizer(BYTE_LEVEL)
    assert detokenizer.feed(smile[:2]) == ""
    assert detokenizer.finish() == BYTE_LEVEL.decode(smile[:2]) == "\ufffd"
    assert detokenizer.finish() == "", "finishing twice says nothing more"


def test_empty_responses_and_skipped_special_tokens_say_nothing() -> None:
    [end] = BYTE_LEVEL.encode("<|im_end|>", add_special_tokens=False).ids
    detokenizer = IncrementalDetokenizer(BYTE_LEVEL, BYTE_LEVEL.encode("hi").ids)
    assert detokenizer.feed([]) == ""
    assert detokenizer.feed([end]) == ""
    kept = IncrementalDetokenizer(BYTE_LEVEL, BYTE_LEVEL.encode("hi").ids, skip_special_tokens=False)
    assert kept.feed([end]) == "<|im_end|>"


def test_a_long_sequence_decodes_as_it_does_at_once() -> None:
    text = " ".join(SENTENCES) * 3
    for tokenizer in (BYTE_LEVEL, METASPACE, BYTE_FALLBACK, TINY_SP):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        detokenizer = IncrementalDetokenizer(tokenizer)
        joined = "".join(detokenizer.feed(ids[i : i + 2]) for i in range(0, len(ids), 2)) + detokenizer.finish()
        assert joined == tokenizer.decode(ids)
