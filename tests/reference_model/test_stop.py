"""Stop strings over bytes: vLLM's truncation, and hold-back so streaming never leaks a stop string."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from stop import StopTextBuffer, longest_stop_prefix_suffix


def stream(buffer: StopTextBuffer, pieces: list[bytes]) -> tuple[list[bytes], bool]:
    deltas = []
    matched = False
    for piece in pieces:
        matched = buffer.append(piece)
        deltas.append(buffer.take_delta(final=matched))
        if matched:
            break
    if not matched:
        deltas.append(buffer.take_delta(final=True))
    return deltas, matched


def test_longest_stop_prefix_suffix() -> None:
    assert longest_stop_prefix_suffix(b"hello wo", b"world") == 2
    assert longest_stop_prefix_suffix(b"hello", b"world") == 0
    assert longest_stop_prefix_suffix(b"w", b"w") == 0  # a full match is not a proper prefix


def test_stop_string_is_excluded_and_the_rest_of_the_token_dropped() -> None:
    buffer = StopTextBuffer(["END"])
    deltas, matched = stream(buffer, [b"abc", b"xEN", b"Dtail", b"never"])
    assert matched and buffer.matched == "END"
    assert b"".join(deltas) == b"abcx"


def test_stop_string_split_across_tokens_is_held_back() -> None:
    buffer = StopTextBuffer(["END"])
    assert buffer.append(b"abE") is False
    assert buffer.take_delta() == b"ab"  # "E" might start "END"
    assert buffer.append(b"N") is False
    assert buffer.take_delta() == b""
    assert buffer.append(b"D!") is True
    assert buffer.take_delta(final=True) == b""
    assert buffer.text == b"ab"


def test_held_back_bytes_are_released_when_the_match_fails() -> None:
    buffer = StopTextBuffer(["END"])
    buffer.append(b"xE")
    assert buffer.take_delta() == b"x"
    buffer.append(b"Nd")
    assert buffer.take_delta() == b"ENd"


def test_include_stop_str_keeps_it_and_does_not_hold_back() -> None:
    buffer = StopTextBuffer(["END"], include_stop_str_in_output=True)
    buffer.append(b"aE")
    assert buffer.take_delta() == b"aE"
    assert buffer.append(b"NDzz") is True
    assert buffer.take_delta(final=True) == b"ND"
    assert buffer.text == b"aEND"


def test_earliest_match_wins_among_several_stops() -> None:
    buffer = StopTextBuffer(["cd", "b"])
    assert buffer.append(b"abcd") is True
    assert buffer.text == b"a"
    assert buffer.matched == "b"


def test_multibyte_stop_string_matches_bytes_split_mid_character() -> None:
    stop = "é!"  # b"\xc3\xa9!"
    buffer = StopTextBuffer([stop])
    buffer.append(b"ok\xc3")
    assert buffer.take_delta() == b"ok"
    assert buffer.append(b"\xa9!") is True
    assert buffer.text == b"ok"


def test_stops_are_ignored_while_check_stops_is_false() -> None:
    buffer = StopTextBuffer(["x"])
    assert buffer.append(b"axb", check_stops=False) is False
    assert buffer.take_delta() == b"axb"
    assert buffer.append(b"x") is True


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.binary(max_size=4), max_size=20),
    stops=st.lists(st.text(alphabet="abc", min_size=1, max_size=3), min_size=1, max_size=3),
    include=st.booleans(),
)
def test_streamed_deltas_equal_the_final_text_and_never_leak_a_stop(
    pieces: list[bytes], stops: list[str], include: bool
) -> None:
    pieces = [bytes(b % 3 + ord("a") for b in piece) for piece in pieces]  # alphabet a, b, c
    buffer = StopTextBuffer(stops, include_stop_str_in_output=include)
    deltas, matched = stream(buffer, pieces)
    assert b"".join(deltas) == buffer.text
    whole = b"".join(pieces)
    if not include:
        sent = b""
        for delta in deltas:
            sent += delta
            # No prefix of what was sent may contain a stop string.
            assert not any(stop.encode() in sent for stop in stops)
    if matched:
        assert len(buffer.text) <= len(whole)
    else:
        assert buffer.text == whole
