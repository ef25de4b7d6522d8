"""The request body's parse (``http.direct.loads``) gives what the stdlib's ``json.loads`` gives.

``loads`` tries pydantic-core's parser first and falls back to the stdlib when it refuses. So the
property to hold is: wherever the fast parser takes a text, the stdlib takes it too, with the same
value, types included (an integer beyond 64 bits stays an ``int``, ``-0.0`` keeps its sign, a key
repeated keeps its first place); wherever it refuses, the stdlib's answer is the answer.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_core import from_json

from gateway.http.direct import loads


def identical(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
    return bool(a == b)


def stdlib(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except Exception as exc:  # noqa: BLE001 - the outcome compared is the exception's type
        return type(exc)


def answer(raw: bytes) -> Any:
    try:
        return loads(raw)
    except Exception as exc:  # noqa: BLE001
        return type(exc)


def same_as_stdlib(raw: bytes) -> None:
    assert identical(answer(raw), stdlib(raw)), raw


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # any code point, lone surrogates included
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(values, st.booleans(), st.sampled_from(["utf-8", "utf-16", "utf-8-sig"]))
def test_any_json_text_parses_to_the_stdlibs_value(value: Any, ascii_only: bool, encoding: str) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    same_as_stdlib(text.encode(encoding, "surrogatepass"))


number = st.from_regex(r"\A-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,4})?\Z")


@settings(max_examples=300)
@given(number)
def test_every_number_literal_parses_to_the_stdlibs_value(literal: str) -> None:
    same_as_stdlib(f'{{"seed": {literal}, "temperature": [{literal}]}}'.encode())


@settings(max_examples=300)
@given(values, st.data())
def test_a_text_cut_or_with_a_byte_changed_is_taken_or_refused_as_the_stdlib_does(
    value: Any, data: st.DataObject
) -> None:
    raw = bytearray(json.dumps(value).encode())
    if raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        if data.draw(st.booleans()):
            raw[at] = data.draw(st.integers(0, 255))
        else:
            del raw[at:]
    same_as_stdlib(bytes(raw))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"seed": -9223372036854775809}',  # beyond 64 bits: orjson would give a float
        b'{"seed": 123456789012345678901234567890}',
        b'{"a": NaN, "b": Infinity, "c": -Infinity, "d": 1e400}',
        b'{"a": 1, "b": 2, "a": 3}',
        b'{"a": -0.0, "b": -0}',
        b'{"a": "\\ud800"}',  # a lone surrogate: jiter refuses, the stdlib keeps it
        b'{"a": "\xed\xa0\x80"}',
        b'\xef\xbb\xbf{"a": 1}',  # a BOM
        "{}".encode("utf-16"),
        b"[" * 300 + b"]" * 300,  # deeper than jiter's limit, within the stdlib's
        b"[" * 5000 + b"]" * 5000,  # beyond both: the stdlib's RecursionError
        b'{"a": 1,}',
        b'{"a": 1} x',
        b"",
        b"\xff",
    ],
)
def test_edges_parse_as_the_stdlib_parses_them(raw: bytes) -> None:
    same_as_stdlib(raw)


def test_the_fast_parser_takes_a_plain_body_and_refuses_what_the_stdlib_then_answers() -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 10_000}]}).encode()
    assert identical(from_json(body), json.loads(body))  # the usual body never reaches the stdlib
    for refused in (b'{"a": "\\ud800"}', b"[" * 300 + b"]" * 300, b'{"a": 1,}'):
        with pytest.raises(ValueError):
            from_json(refused)
