"""Chat templates render exactly what transformers' apply_chat_template renders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers

from gateway.errors import InvalidRequestError
from gateway.models.templates import ChatTemplate

WEIGHTS = Path(__file__).resolve().parents[2] / "triton_models" / "weights" / "tiny-llm"

CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi ünïcode 🙂"},
        {"role": "assistant", "content": "Hey."},
        {"role": "user", "content": "Again"},
    ],
    [{"role": "developer", "content": "Rules"}, {"role": "user", "content": None}],
]

LLAMA_LIKE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}<<SYS>>{{ m['content'] | trim }}<</SYS>>"
    "{% else %}[{{ m['role'] | upper }}] {{ m['content'] }}{% endif %}\n{% endfor %}"
    "{% if tools %}{{ tools | tojson }}{% endif %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}"
    "{% generation %}{{ eos_token }}{% endgeneration %}"
)


@pytest.fixture(scope="module")
def hf_tokenizer():  # type: ignore[no-untyped-def]
    return transformers.PreTrainedTokenizerFast.from_pretrained(str(WEIGHTS))


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_shipped_template_matches_transformers(hf_tokenizer, messages, add_generation_prompt: bool) -> None:  # type: ignore[no-untyped-def]
    template = ChatTemplate.from_directory(WEIGHTS)
    assert template is not None
    expected = hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert template.render(messages, add_generation_prompt=add_generation_prompt) == expected


@pytest.mark.parametrize("messages", CONVERSATIONS[:2])
def test_template_in_tokenizer_config_only_matches_transformers(hf_tokenizer, tmp_path: Path, messages) -> None:  # type: ignore[no-untyped-def]
    hf_tokenizer.save_pretrained(tmp_path)
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = LLAMA_LIKE
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    reloaded = transformers.PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    expected = reloaded.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    template = ChatTemplate.from_directory(tmp_path)
    assert template is not None
    assert template.render(messages, add_generation_prompt=True, tools=tools) == expected


def test_directory_without_template_gives_none(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    assert ChatTemplate.from_directory(tmp_path) is None


def test_template_raise_exception_becomes_400() -> None:
    template = ChatTemplate("{{ raise_exception('no system messages') }}")
    with pytest.raises(InvalidRequestError, match="no system messages") as info:
        template.render([{"role": "system", "content": "x"}])
    assert info.value.status_code == 400 and info.value.param == "messages"


def test_template_runtime_error_becomes_400() -> None:
    template = ChatTemplate("{{ messages[5]['content'] }}")
    with pytest.raises(InvalidRequestError):
        template.render([{"role": "user", "content": "x"}])


def test_template_cannot_escape_sandbox() -> None:
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(InvalidRequestError):
        template.render([{"role": "user", "content": "x"}])


def test_template_sees_every_global_on_every_render() -> None:
    """The globals HF templates use, ours and jinja's own, on a first render and a later one (a
    template's globals are copied into a plain dict once, at loading)."""
    source = (
        "{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}"
        "{{ ns.n }} {{ strftime_now('%Y') | length }} {{ bos_token }}{{ messages[0]['content'] }}"
    )
    template = ChatTemplate(source, {"bos_token": "<s>"})
    for text in ("a", "b"):
        assert template.render([{"role": "user", "content": text}]) == f"3 4 <s>{text}"
