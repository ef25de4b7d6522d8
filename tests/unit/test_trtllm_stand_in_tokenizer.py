"""tiny-sp, the stand-ins' SentencePiece-style tokenizer (tests/trtllm_stand_ins/build.py), and the
light loader the stand-ins read it with (tests/trtllm_stand_ins/tokenizer.py)."""

from __future__ import annotations

import filecmp
from pathlib import Path

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tests.trtllm_stand_ins.build import ASSETS, CHAT_TEMPLATE, build
from tests.trtllm_stand_ins.tokenizer import HfTokenizer

TOKENIZER_DIR = ASSETS / "tiny-sp"


@pytest.fixture(scope="module")
def tokenizer() -> HfTokenizer:
    return HfTokenizer.load(TOKENIZER_DIR)


def test_the_build_is_deterministic_and_the_committed_assets_are_its_output(tmp_path: Path) -> None:
    build(tmp_path)
    for relative in (
        "tiny-sp/tokenizer.json",
        "tiny-sp/tokenizer_config.json",
        "tiny-sp/special_tokens_map.json",
        "lora/alpha/model.lora_weights.npy",
        "lora/alpha/model.lora_config.npy",
        "lora/beta/model.lora_weights.npy",
        "lora/beta/model.lora_config.npy",
    ):
        assert filecmp.cmp(tmp_path / relative, ASSETS / relative, shallow=False), relative


def test_the_vocabulary_is_tiny_llms_size_with_llama_like_specials(tokenizer: HfTokenizer) -> None:
    assert tokenizer.vocab_size == 1333
    assert [tokenizer.backend.id_to_token(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert (tokenizer.end_id, tokenizer.pad_id) == (2, 0)
    assert tokenizer.backend.id_to_token(4) == "<0x00>" and tokenizer.backend.id_to_token(259) == "<0xFF>"
    assert tokenizer.decode(list(range(260, 1333)))  # every id decodes


def test_bos_is_added_by_the_post_processor_only_with_special_tokens(tokenizer: HfTokenizer) -> None:
    with_bos = tokenizer.encode("the model")
    assert with_bos[0] == 1 and tokenizer.encode("the model", add_special_tokens=False) == with_bos[1:]


def test_decoding_each_token_alone_loses_the_spaces_one_decode_keeps(tokenizer: HfTokenizer) -> None:
    ids = tokenizer.encode("the model streams tokens", add_special_tokens=False)
    assert tokenizer.decode(ids) == "the model streams tokens"
    assert "".join(tokenizer.decode([token]) for token in ids) == "themodelstreamstokens"


def test_unknown_characters_fall_back_to_bytes_and_a_split_character_is_a_replacement(tokenizer: HfTokenizer) -> None:
    ids = tokenizer.encode("ok ✓", add_special_tokens=False)
    assert 3 not in ids  # never <unk>
    assert tokenizer.decode(ids) == "ok ✓"
    assert "\ufffd" in tokenizer.decode(ids[:-1])


def test_the_light_loader_agrees_with_auto_tokenizer(tokenizer: HfTokenizer) -> None:
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    for text in ("Deep learning is a gateway", "Café 日本 </s> <s>[INST] hi [/INST]", "  two  spaces"):
        assert tokenizer.encode(text) == reference(text)["input_ids"]
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == reference.decode(ids, skip_special_tokens=True)
        assert tokenizer.decode(ids, skip_special_tokens=False) == reference.decode(ids)
    assert (reference.eos_token_id, reference.pad_token_id, reference.bos_token_id) == (2, 0, 1)
    assert reference.chat_template == CHAT_TEMPLATE


def _render(messages: list[dict[str, str]]) -> str:
    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    environment = ImmutableSandboxedEnvironment()
    environment.globals["raise_exception"] = raise_exception
    return environment.from_string(CHAT_TEMPLATE).render(messages=messages, bos_token="<s>", eos_token="</s>")


def test_the_chat_template_renders_llama_2_turns() -> None:
    rendered = _render(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "More"},
        ]
    )
    assert rendered == "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] More [/INST]"
    assert _render([{"role": "user", "content": "Hi"}]) == "<s>[INST] Hi [/INST]"
    with pytest.raises(jinja2.TemplateError, match="unsupported role tool"):
        _render([{"role": "tool", "content": "x"}])
