"""Stream assembly: stop strings, UTF-8, finish reasons and usage, for any chunking."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.backend.types import GenerationChunk
from gateway.core.assemble import GenerationAssembler, find_stop, partial_stop_length
from gateway.errors import BackendError


def reference_cut(text: str, stops: list[str], include: bool) -> tuple[str, bool]:
    """What a token-by-token engine would show: cut at the first stop to complete."""
    for end in range(1, len(text) + 1):
        window = text[:end]
        hits = [(window.find(s), s) for s in stops if s and window.endswith(s)]
        if hits:
            start, stop = min(hits)
            return (text[: start + len(stop)] if include else text[:start]), True
    return text, False


def split_bytes(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)] or [b""]


def run(
    pieces: list[bytes], stops: list[str], include: bool, backend_reason: str = "length"
) -> tuple[str, str | None, int]:
    assembler = GenerationAssembler(1, stops=stops, include_stop=include, max_tokens=None)
    out = []
    for position, piece in enumerate(pieces):
        last = position == len(pieces) - 1
        chunk = GenerationChunk(
            text=(piece,),
            finish_reason=(backend_reason if last else None,),
            num_input_tokens=5,
            num_output_tokens=(1,),
            final=last,
        )
        for event in assembler.feed(chunk):
            out.append(event.text)
        if assembler.done:
            break
    return "".join(out), assembler.choices[0].finish_reason, assembler.usage.completion_tokens


alphabet = st.sampled_from(list("ab xé€🙂\n"))
texts = st.text(alphabet=alphabet, max_size=40)
stop_lists = st.lists(st.text(alphabet=alphabet, min_size=1, max_size=4), max_size=3)


@settings(max_examples=400, deadline=None)
@given(text=texts, stops=stop_lists, cuts=st.lists(st.integers(0, 200), max_size=12), include=st.booleans())
def test_stream_equals_reference_cut_for_any_chunking(
    text: str, stops: list[str], cuts: list[int], include: bool
) -> None:
    pieces = split_bytes(text.encode("utf-8"), cuts)
    streamed, reason, _ = run(pieces, stops, include)
    expected, stopped = reference_cut(text, stops, include)
    assert streamed == expected
    assert "\ufffd" not in streamed
    assert reason == ("stop" if stopped else "length")


@settings(max_examples=200, deadline=None)
@given(text=texts, stops=stop_lists, cuts=st.lists(st.integers(0, 200), max_size=12))
def test_no_chunk_ever_shows_part_of_a_matched_stop(text: str, stops: list[str], cuts: list[int]) -> None:
    pieces = split_bytes(text.encode("utf-8"), cuts)
    streamed, reason, _ = run(pieces, stops, include=False)
    if reason == "stop":
        expected, _ = reference_cut(text, stops, False)
        # everything emitted is a prefix of the cut text: nothing past the stop's start leaked
        assert expected.startswith(streamed) and streamed == expected


def test_stop_string_split_across_chunks_never_leaks() -> None:
    streamed, reason, _ = run([b"hello wo", b"rld STO", b"P tail"], ["STOP"], include=False, backend_reason="length")
    assert (streamed, reason) == ("hello world ", "stop")


@settings(max_examples=400, deadline=None)
@given(
    data=st.lists(
        st.one_of(
            st.binary(max_size=6),
            st.sampled_from([b"\xe2\x82", b"\xac", b"\xf0\x9f", b"\x99\x82", b"\xc3", b"\xff", b"\x80", b"\xed\xa0"]),
        ),
        max_size=12,
    ).map(b"".join),
    cuts=st.lists(st.integers(0, 200), max_size=12),
)
def test_any_bytes_cut_anywhere_decode_as_one_decode_with_replacement(data: bytes, cuts: list[int]) -> None:
    """Invalid bytes, split characters and ASCII in any mix: each piece decoded as it comes (the
    pieces ending in ASCII alone, the others by the incremental decoder) gives what decoding the
    whole at once gives."""
    streamed, _, _ = run(split_bytes(data, cuts), [], False)
    assert streamed == data.decode("utf-8", "replace")


def test_split_utf8_character_is_joined_not_replaced() -> None:
    data = "a🙂b".encode()
    streamed, reason, _ = run([data[:2], data[2:4], data[4:]], [], include=False, backend_reason="stop")
    assert (streamed, reason) == ("a🙂b", "stop")


def test_usage_sums_output_deltas_and_keeps_last_input_count() -> None:
    _, _, completion = run([b"a", b"b", b"c"], [], include=False)
    assert completion == 3


def test_finish_inferred_from_token_cap_when_backend_gives_none() -> None:
    assembler = GenerationAssembler(1, max_tokens=2)
    assembler.feed(GenerationChunk(text=(b"x",), finish_reason=(None,), num_output_tokens=(1,)))
    events = assembler.feed(GenerationChunk(text=(b"y",), finish_reason=(None,), num_output_tokens=(1,), final=True))
    assert events[-1].finish_reason == "length"


def test_n_choices_finish_independently() -> None:
    assembler = GenerationAssembler(2, stops=["!"])
    events = assembler.feed(GenerationChunk(text=(b"a!", b"b"), finish_reason=(None, None), num_output_tokens=(1, 1)))
    assert [(e.index, e.text, e.finish_reason) for e in events] == [(0, "a", "stop"), (1, "b", None)]
    events = assembler.feed(
        GenerationChunk(text=(b"zz", b"c"), finish_reason=("length", "length"), num_output_tokens=(1, 1), final=True)
    )
    assert [(e.index, e.text, e.finish_reason) for e in events] == [(1, "c", "length")]
    assert assembler.done


def test_backend_abort_is_an_error() -> None:
    assembler = GenerationAssembler(1)
    with pytest.raises(BackendError):
        assembler.feed(GenerationChunk(text=(b"",), finish_reason=("abort",)))


def test_more_sequences_than_asked_is_an_error() -> None:
    with pytest.raises(BackendError):
        GenerationAssembler(1).feed(GenerationChunk(text=(b"a", b"b"), finish_reason=(None, None)))


def test_find_stop_prefers_the_stop_that_completes_first() -> None:
    assert find_stop("abcd", ["abcd", "bc"]) == (1, "bc")
    assert find_stop("xx", ["y"]) is None


def test_partial_stop_length_is_longest_suffix_prefix() -> None:
    assert partial_stop_length("hello ST", ["STOP", "T"]) == 2
    assert partial_stop_length("hello", ["STOP"]) == 0


def test_coalesce_joins_text_of_a_choice_and_keeps_finish_last() -> None:
    from gateway.core.assemble import ChoiceEvent, coalesce

    events = [
        ChoiceEvent(0, "a", None, None),
        ChoiceEvent(1, "x", None, None),
        ChoiceEvent(0, "b", "stop", None),
        ChoiceEvent(0, "c", None, None),
    ]
    assert coalesce(events) == [
        ChoiceEvent(0, "ab", "stop", None),
        ChoiceEvent(1, "x", None, None),
        ChoiceEvent(0, "c", None, None),
    ]
    with_logprobs = [ChoiceEvent(0, "a", None, {"content": [1]}), ChoiceEvent(0, "b", None, {"content": [2]})]
    assert coalesce(with_logprobs) == with_logprobs


def test_legacy_logprob_offsets_continue_across_chunks_and_after_echo() -> None:
    from gateway.core.assemble import RequestAssembler

    def entry(token: str) -> dict[str, dict[str, object]]:
        return {"1": {"logprob": -1.0, "rank": 1, "decoded_token": token}}

    run = RequestAssembler(n=1, chat=False, top_logprobs=0, max_tokens=[5], echo=["abc"])
    first = run.feed(0, GenerationChunk((b"ab",), (None,), 1, (2,), ([entry("a"), entry("b")],)))
    second = run.feed(0, GenerationChunk((b"cd",), ("length",), 1, (2,), ([entry("c"), entry("d")],), True))
    assert first[0].logprobs["text_offset"] == [3, 4]
    assert second[0].logprobs["text_offset"] == [5, 6]


def test_streamed_legacy_offsets_after_a_token_ending_inside_a_utf8_character_equal_non_streamed() -> None:
    # What vLLM sends for such a token: its decoded token is "", its byte is held back by the
    # decoder, and the next token's bytes make it invalid, so the text shows U+FFFD that no
    # token carries. Offsets count the tokens, streamed or not.
    from gateway.core.assemble import RequestAssembler

    def entry(token: str) -> dict[str, dict[str, object]]:
        return {"1": {"logprob": -1.0, "rank": 1, "decoded_token": token}}

    pieces = [(b"ab", "ab"), (b"\xe2", ""), (b"For", "For"), (b"x", "x")]
    streamed = RequestAssembler(n=1, chat=False, top_logprobs=0, max_tokens=[4])
    offsets, text = [], ""
    for at, (data, token) in enumerate(pieces):
        last = at == len(pieces) - 1
        chunk = GenerationChunk((data,), ("length" if last else None,), 1, (1,), ([entry(token)],), last)
        for event in streamed.feed(0, chunk):
            offsets.extend(event.logprobs["text_offset"])
            text += event.text
    whole = RequestAssembler(n=1, chat=False, top_logprobs=0, max_tokens=[4])
    data = b"".join(d for d, _ in pieces)
    (event,) = whole.feed(0, GenerationChunk((data,), ("length",), 1, (4,), ([entry(t) for _, t in pieces],), True))
    assert text == event.text == "ab\ufffdForx"
    assert offsets == event.logprobs["text_offset"] == [0, 2, 2, 5]


@pytest.mark.parametrize(
    "chunk",
    [
        # Triton's vLLM backend with n=2, not streaming: the last output only, but both reasons
        GenerationChunk(text=(b"tail",), finish_reason=("length", "stop"), num_output_tokens=(8,)),
        GenerationChunk(text=(b"a",), finish_reason=(None,), num_output_tokens=(1, 1)),
        GenerationChunk(text=(b"a",), finish_reason=(None,), logprobs=([], [])),
    ],
    ids=["finish_reason", "num_output_tokens", "logprobs"],
)
def test_outputs_disagreeing_on_the_number_of_sequences_are_an_error_not_a_made_up_stop(
    chunk: GenerationChunk,
) -> None:
    with pytest.raises(BackendError, match="inconsistent"):
        GenerationAssembler(2).feed(chunk)


def test_request_assembler_gives_each_generation_its_choice_and_counts_a_prompt_once() -> None:
    from gateway.core.assemble import RequestAssembler

    run = RequestAssembler(n=2, chat=False, top_logprobs=None, max_tokens=[5, 5], prompt_tokens=[7, 9])
    assert run.usage.prompt_tokens == 16  # the gateway's own counts, before the backend reports
    events = run.feed(3, GenerationChunk((b"d",), ("stop",), 9, (2,), None, True))
    events += run.feed(1, GenerationChunk((b"b",), ("length",), 7, (5,), None, True))
    assert [(e.index, e.text, e.finish_reason) for e in events] == [(3, "d", "stop"), (1, "b", "length")]
    assert (run.usage.prompt_tokens, run.usage.completion_tokens) == (16, 7)
    assert run.finish_reasons == [None, "length", None, "stop"]
