"""The request's context from its headers (``gateway/http/deps.py``): the deadline and the session."""

from __future__ import annotations

import time

import pytest
from starlette.requests import Request

from gateway.config import Settings
from gateway.errors import InvalidRequestError
from gateway.http.deps import request_context


def request(*headers: tuple[bytes, bytes]) -> Request:
    scope = {"type": "http", "method": "POST", "path": "/", "headers": list(headers), "state": {"request_id": "r1"}}
    return Request(scope)


def test_a_request_without_the_headers_has_the_configured_deadline_and_no_session() -> None:
    context = request_context(request((b"content-type", b"application/json")), Settings())
    assert (context.request_id, context.deadline, context.session_key) == ("r1", None, None)
    before = time.monotonic()
    context = request_context(request(), Settings(request_timeout=30))
    assert context.deadline is not None and before + 30 <= context.deadline <= time.monotonic() + 30


def test_the_timeout_header_lowers_the_deadline_and_never_raises_it() -> None:
    before = time.monotonic()
    lowered = request_context(request((b"x-request-timeout", b"2.5")), Settings(request_timeout=30))
    assert lowered.deadline is not None and before + 2.5 <= lowered.deadline <= time.monotonic() + 2.5
    kept = request_context(request((b"x-request-timeout", b"60")), Settings(request_timeout=30))
    assert kept.deadline is not None and kept.deadline <= time.monotonic() + 30
    unset = request_context(request((b"x-request-timeout", b"5")), Settings())
    assert unset.deadline is not None and unset.deadline <= time.monotonic() + 5


@pytest.mark.parametrize("value", [b"0", b"-1", b"soon", b"nan", b""])
def test_a_timeout_that_is_not_a_positive_number_is_refused(value: bytes) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        request_context(request((b"x-request-timeout", value)), Settings())
    assert caught.value.message == f"x-request-timeout must be a positive number of seconds, got {value.decode()!r}"


def test_the_first_of_each_header_is_read_as_starlette_reads_it() -> None:
    context = request_context(
        request(
            (b"x-session-id", b"s1"),
            (b"x-request-timeout", b"3"),
            (b"x-session-id", b"s2"),
            (b"x-request-timeout", b"bad"),
        ),
        Settings(),
    )
    assert context.session_key == "s1"
    assert context.deadline is not None and context.deadline <= time.monotonic() + 3


def test_an_empty_session_header_is_no_session() -> None:
    assert request_context(request((b"x-session-id", b"")), Settings()).session_key is None
