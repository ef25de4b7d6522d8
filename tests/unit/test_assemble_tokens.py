"""Assembly of a backend that answers token ids (``core/assemble.py`` with a ``Detokenizing``
plan: TensorRT-LLM's ``tensorrt_llm`` model), and of one that reports no token counts
(``count_text``: the LLM-API model). Chunks are what ``TokenReader`` and ``TextReader`` make:
ids with empty text, or text with no counts."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from gateway.backend.types import GenerationChunk
from gateway.core.assemble import ChoiceEvent, RequestAssembler
from gateway.core.detokenize import PROMPT_CONTEXT
from gateway.core.generation_plan import Detokenizing

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = Tokenizer.from_file(str(ROOT / "triton_models" / "weights" / "tiny-llm" / "tokenizer.json"))
PROMPT = TOKENIZER.encode("<|im_start|>user\nThe weather?<|im_end|>\n<|im_start|>assistant\n").ids
ANSWER = TOKENIZER.encode(" In Paris it is mild today 🙂, with clouds later.", add_special_tokens=False).ids
[END] = TOKENIZER.encode("<|im_end|>", add_special_tokens=False).ids


def tokens_chunk(ids: list[int] | tuple[int, ...], final: bool = False) -> GenerationChunk:
    """What ``TokenReader`` makes of one response."""
    return GenerationChunk((b"",), (None,), len(PROMPT), (len(ids),), None, final, (tuple(ids),))


def assembler(
    max_tokens: int = 64, stops: tuple[str, ...] = (), skip: bool = True, n: int = 1, prompt: list[int] = PROMPT
) -> RequestAssembler:
    return RequestAssembler(
        n=n,
        chat=True,
        top_logprobs=None,
        max_tokens=[max_tokens],
        stops=stops,
        detokenize=Detokenizing(TOKENIZER, skip),
        prompt_ids=[prompt] * n,
    )


def pieces(ids: list[int], cuts: list[int]) -> list[list[int]]:
    points = sorted({0, len(ids), *(c % (len(ids) + 1) for c in cuts)})
    return [ids[a:b] for a, b in zip(points, points[1:], strict=False)]


def feed_all(request: RequestAssembler, chunks: list[GenerationChunk], position: int = 0) -> list[ChoiceEvent]:
    events: list[ChoiceEvent] = []
    for chunk in chunks:
        events += request.feed(position, chunk)
        if request.done:
            break
    return events


def text_of(events: list[ChoiceEvent]) -> str:
    return "".join(e.text for e in events)


def expected_text(ids: list[int], skip: bool = True) -> str:
    tail = PROMPT[-PROMPT_CONTEXT:]
    return TOKENIZER.decode(tail + ids, skip_special_tokens=skip)[
        len(TOKENIZER.decode(tail, skip_special_tokens=skip)) :
    ]


@settings(max_examples=80, deadline=None)
@given(cuts=st.lists(st.integers(0, 100), max_size=10), spare=st.integers(0, 3))
def test_token_ids_become_the_whole_decodes_text_with_exact_usage(cuts: list[int], spare: int) -> None:
    request = assembler(max_tokens=len(ANSWER) + spare)
    chunks = [tokens_chunk(p) for p in pieces(ANSWER, cuts)]
    events = feed_all(request, [*chunks[:-1], chunks[-1]._replace(final=True)])
    assert text_of(events) == expected_text(ANSWER) == " In Paris it is mild today 🙂, with clouds later."
    assert "\ufffd" not in text_of(events)
    assert request.usage.prompt_tokens == len(PROMPT)
    assert request.usage.completion_tokens == len(ANSWER)
    assert request.finish_reasons == ["length" if spare == 0 else "stop"]
    assert events[-1].finish_reason == request.finish_reasons[0]


def test_an_empty_final_response_ends_the_choice() -> None:
    request = assembler(max_tokens=len(ANSWER))
    events = feed_all(request, [tokens_chunk(ANSWER[:5]), tokens_chunk(ANSWER[5:]), tokens_chunk((), final=True)])
    assert text_of(events) == expected_text(ANSWER)
    assert request.finish_reasons == ["length"]
    assert request.usage.completion_tokens == len(ANSWER)


def test_a_stream_that_ends_inside_a_character_gives_it_as_a_replacement_character() -> None:
    smile = TOKENIZER.encode("🙂", add_special_tokens=False).ids
    request = assembler(max_tokens=64)
    events = feed_all(request, [tokens_chunk(ANSWER[:3]), tokens_chunk(smile[:2])])
    assert text_of(events) == expected_text(ANSWER[:3]), "the unfinished character is held"
    events += request.close()
    assert text_of(events) == expected_text(ANSWER[:3] + smile[:2])
    assert text_of(events).endswith("\ufffd")
    assert request.finish_reasons == ["stop"]


def test_stop_strings_are_cut_in_the_detokenized_text() -> None:
    request = assembler(stops=("Paris",))
    events = feed_all(request, [tokens_chunk([i]) for i in ANSWER])
    assert text_of(events) == " In "
    assert request.finish_reasons == ["stop"]
    assert request.stop_sequences == ["Paris"]
    # Counted: the ids up to the response that completed the stop string.
    completed = next(k for k in range(1, len(ANSWER) + 1) if "Paris" in expected_text(ANSWER[:k]))
    assert request.usage.completion_tokens == completed


def test_special_tokens_are_kept_when_the_plan_keeps_them() -> None:
    ids = [*ANSWER[:4], END]
    kept = assembler(skip=False)
    text = text_of(feed_all(kept, [tokens_chunk(ids, final=True)]))
    assert text == expected_text(ids, skip=False) and text.endswith("<|im_end|>")
    skipped = assembler(skip=True)
    assert text_of(feed_all(skipped, [tokens_chunk(ids, final=True)])) == expected_text(ANSWER[:4])


def test_each_choice_has_its_own_detokenizer() -> None:
    request = assembler(n=2)
    first = feed_all(request, [tokens_chunk(ANSWER[:6]), tokens_chunk(ANSWER[6:], final=True)], position=0)
    second = feed_all(request, [tokens_chunk(ANSWER[:2], final=True)], position=1)
    assert text_of(first) == expected_text(ANSWER)
    assert text_of(second) == expected_text(ANSWER[:2])
    assert {e.index for e in second} == {1}
    assert request.usage.completion_tokens == len(ANSWER) + 2


def count_text(text: str) -> int:
    return len(TOKENIZER.encode(text, add_special_tokens=False).ids)


def counting(max_tokens: int, stops: tuple[str, ...] = ()) -> RequestAssembler:
    return RequestAssembler(
        n=1, chat=True, top_logprobs=None, max_tokens=[max_tokens], stops=stops, count_text=count_text
    )


def text_chunk(text: str, reason: str | None = None, final: bool = False) -> GenerationChunk:
    """What the LLM-API model's reader makes: text, no counts."""
    return GenerationChunk((text.encode(),), (reason,), None, None, None, final)


DELTAS = ["Hello", " wor", "ld", ", and", " more 🙂", "!"]
WHOLE = "".join(DELTAS)


def test_count_text_counts_a_choice_that_reports_no_counts() -> None:
    request = counting(max_tokens=count_text(WHOLE) + 5)
    chunks = [text_chunk(d) for d in DELTAS[:-1]] + [text_chunk(DELTAS[-1], "stop", final=True)]
    assert text_of(feed_all(request, chunks)) == WHOLE
    assert request.usage.completion_tokens == count_text(WHOLE)
    assert request.finish_reasons == ["stop"]


def test_count_text_says_length_when_the_text_reaches_max_tokens() -> None:
    request = counting(max_tokens=count_text(WHOLE))
    chunks = [text_chunk(d) for d in DELTAS[:-1]] + [text_chunk(DELTAS[-1], final=True)]
    assert text_of(feed_all(request, chunks)) == WHOLE
    assert request.usage.completion_tokens == count_text(WHOLE)
    assert request.finish_reasons == ["length"]


def test_count_text_counts_when_the_stream_just_ends() -> None:
    request = counting(max_tokens=100)
    events = feed_all(request, [text_chunk(d) for d in DELTAS])
    events += request.close()
    assert text_of(events) == WHOLE
    assert request.usage.completion_tokens == count_text(WHOLE)
    assert request.finish_reasons == ["stop"]


def test_count_text_counts_the_text_up_to_a_stop_string() -> None:
    request = counting(max_tokens=100, stops=("world",))
    assert text_of(feed_all(request, [text_chunk(d) for d in DELTAS])) == "Hello "
    assert request.finish_reasons == ["stop"]
    assert request.usage.completion_tokens == count_text("Hello world")
