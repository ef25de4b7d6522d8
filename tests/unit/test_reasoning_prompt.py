"""The rendered prompt decides where a request's output starts: inside the reasoning (a template
that opens ``<think>`` in the generation prompt, Qwen3.5-style), in the answer (a closed block:
thinking off), or as the parser's default. Decided once, at planning."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import ModelFiles, Settings
from gateway.core.generation_plan import ReasoningPlan
from gateway.core.reasoning import ReasoningReader
from gateway.models.catalog import ModelCatalog, ServedModel
from gateway.plan.prepare import RequestContext, prepare_chat, prepare_completion
from gateway.plan.reasoning import plan_reasoning
from gateway.plan.requests import ChatCompletionRequest, CompletionRequest
from gateway.reasoning.prompt import PromptReasoning, prompt_reasoning
from gateway.reasoning.registry import REASONING_PARSERS
from tests.fakes import ScriptedBackend
from tests.unit.test_app import WEIGHTS
from tests.unit.test_reasoning_parsers import check_every_split, run

QWEN35_STYLE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
)
"""A chat template that opens the reasoning in the generation prompt, and writes an empty, closed
block there when ``enable_thinking`` is false (the shape of Qwen3.5's and GLM-4.5's)."""


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("<|im_start|>assistant\n<think>\n", PromptReasoning.OPEN),
        ("<|im_start|>assistant\n<think>", PromptReasoning.OPEN),
        ("<｜Assistant｜><think>\n", PromptReasoning.OPEN),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", PromptReasoning.CLOSED),
        ("<｜Assistant｜></think>", PromptReasoning.CLOSED),
        ("<|im_start|>assistant\n", None),
        ("", None),
        # markers earlier in the prompt belong to past turns, or are quoted: only the end counts
        ("<think>\nold\n</think>\n\nanswer<|im_end|>\n<|im_start|>assistant\n", None),
        ("<|im_start|>user\nwhat is <think>?<|im_end|>\n<|im_start|>assistant\n", None),
        ("<|im_start|>assistant\n<think>\nprefilled thought", None),
        ("x" * 10_000 + "<think>\n", PromptReasoning.OPEN),
    ],
)
def test_only_the_prompts_end_says_where_the_reasoning_is(prompt: str, expected: PromptReasoning | None) -> None:
    assert prompt_reasoning(prompt, ("<think>",), ("</think>",)) == expected


def test_only_the_think_family_reads_the_prompt() -> None:
    """Harmony, Magistral and Granite templates never open their reasoning in the prompt."""
    readers = {name for name, spec in REASONING_PARSERS.items() if spec.prompt_markers is not None}
    assert readers == {"deepseek_r1", "deepseek_v3", "qwen3"}
    assert REASONING_PARSERS["mistral"].from_prompt("[THINK]") is None


# qwen3 after a prompt ending in <think>: (model output, reasoning, content)
OPENED = [
    ("Weigh 2+2.\n</think>\n\nIt is 4.", "Weigh 2+2.\n", "\n\nIt is 4."),
    ("<think>written anyway</think>4", "written anyway", "4"),
    ("\n\nleading space</think>4", "\n\nleading space", "4"),
    ("cut off by max_tokens <", "cut off by max_tokens <", ""),
    ("</think>", "", ""),
    ("a</think>b</think>c", "a", "b</think>c"),
    ("", "", ""),
]


@pytest.mark.parametrize(("output", "reasoning", "content"), OPENED)
def test_an_opened_prompt_starts_qwen3_inside_the_reasoning_at_every_split(
    output: str, reasoning: str, content: str
) -> None:
    check_every_split("qwen3", output, (reasoning, content), opened=True)


def test_without_an_opened_prompt_qwen3_is_as_before() -> None:
    assert run("qwen3", ["Weigh.</think>4"], opened=False) == ("", "Weigh.</think>4")
    assert run("qwen3", ["<think>Weigh.</think>4"], opened=False) == ("Weigh.", "4")


def test_the_reader_counts_an_opened_outputs_first_tokens_as_reasoning() -> None:
    reader = ReasoningReader(ReasoningPlan("qwen3", opened=True))
    assert reader.read("Weigh", False, 1) == ("Weigh", "")
    assert reader.read(" it</think>", False, 2) == (" it", "")
    assert reader.read("4", True, 1) == ("", "4")
    assert reader.tokens == 3


def model(parser: str) -> ServedModel:
    return ServedModel(name="m", reasoning_parser=parser)


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    )


@pytest.mark.parametrize(
    ("parser", "prompt", "kwargs", "expected"),
    [
        ("qwen3", "<|im_start|>assistant\n<think>\n", None, ReasoningPlan("qwen3", opened=True)),
        ("qwen3", "<|im_start|>assistant\n<think>\n\n</think>\n\n", None, None),
        ("qwen3", "<|im_start|>assistant\n", None, ReasoningPlan("qwen3", opened=False)),
        ("deepseek_r1", "<｜Assistant｜><think>\n", None, ReasoningPlan("deepseek_r1", opened=True)),
        ("deepseek_r1", "<｜Assistant｜></think>", None, None),
        ("deepseek_r1", "<｜Assistant｜>", None, ReasoningPlan("deepseek_r1")),
        # deepseek_v3's switch decides only where the prompt does not
        ("deepseek_v3", "<｜Assistant｜>", None, None),
        ("deepseek_v3", "<｜Assistant｜>", {"thinking": True}, ReasoningPlan("deepseek_v3")),
        ("deepseek_v3", "<｜Assistant｜><think>", None, ReasoningPlan("deepseek_v3", opened=True)),
        ("deepseek_v3", "<｜Assistant｜></think>", {"thinking": True}, None),
        ("granite", "Here is my thought process:", None, ReasoningPlan("granite")),
    ],
)
def test_the_plan_follows_the_prompt(
    parser: str, prompt: str, kwargs: dict[str, Any] | None, expected: ReasoningPlan | None
) -> None:
    body = chat(chat_template_kwargs=kwargs) if kwargs else chat()
    assert plan_reasoning(body, model(parser), prompt=prompt, constrained=False, calls=False) == expected


def test_a_constrained_request_is_not_split_even_after_an_opened_prompt() -> None:
    prompt = "<|im_start|>assistant\n<think>\n"
    assert plan_reasoning(chat(), model("qwen3"), prompt=prompt, constrained=True, calls=False) is None


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def catalog(tmp_path: Path) -> AsyncIterator[ModelCatalog]:
    """Model ``m``: tiny-llm's tokenizer with the Qwen3.5-style template (detected: ``qwen3``)."""
    version = tmp_path / "repo" / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(json.dumps({"model": str(WEIGHTS), "max_model_len": 4096}))
    template = tmp_path / "qwen35.jinja"
    template.write_text(QWEN35_STYLE)
    catalog = ModelCatalog(
        ScriptedBackend(),  # type: ignore[arg-type]
        [tmp_path / "repo"],
        overrides={"m": ModelFiles(chat_template=template)},
    )
    await catalog.refresh()
    yield catalog
    catalog.close()


@pytest.mark.anyio
async def test_planning_reads_the_rendered_prompt(catalog: ModelCatalog) -> None:
    assert (await catalog.models())["m"].reasoning_parser == "qwen3"
    plan = await prepare_chat(chat(), RequestContext("r"), catalog, Settings())
    assert plan.requests[0].prompt.endswith("<think>\n")
    assert plan.reasoning == ReasoningPlan("qwen3", opened=True)
    off = await prepare_chat(
        chat(chat_template_kwargs={"enable_thinking": False}), RequestContext("r"), catalog, Settings()
    )
    assert off.requests[0].prompt.endswith("</think>\n\n")
    assert off.reasoning is None, "thinking off: the model answers plainly"


@pytest.mark.anyio
async def test_a_completion_whose_prompt_opens_think_is_not_split(catalog: ModelCatalog) -> None:
    """As vLLM's /v1/completions: no reasoning parser there, the text is the answer as generated."""
    body = CompletionRequest.model_validate({"model": "m", "prompt": "<|im_start|>assistant\n<think>\n"})
    plan = await prepare_completion(body, RequestContext("r"), catalog, Settings())
    assert plan.reasoning is None
