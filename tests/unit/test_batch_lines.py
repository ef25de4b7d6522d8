"""The Batch API's pure parts: an input file's checks (``jobs.lines``), a batch creation's and an
upload's checks (``plan.batches``), and the objects a client reads (``openai.batches_encode``).

A file the gateway takes is one it can run, and a file it refuses is refused whole, naming the
first bad line by its number in the file; the bodies it keeps are the values the file held.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types import Batch, FileDeleted, FileObject
from pydantic import ValidationError

from gateway.errors import InvalidRequestError
from gateway.jobs.lines import BATCH_ENDPOINTS, MAX_CUSTOM_ID, InputLine, parse_input_file
from gateway.jobs.records import BatchRecord, FileRecord, RequestCounts
from gateway.openai.batches_encode import batch_object, file_deleted, file_object, object_list
from gateway.plan.batches import (
    FILE_EXPIRY_SECONDS,
    MAX_WINDOW_HOURS,
    METADATA_KEY_CHARS,
    METADATA_PAIRS,
    METADATA_VALUE_CHARS,
    BatchCreateRequest,
    ExpiresAfter,
    check_batch,
    check_metadata,
    check_purpose,
    expiry_seconds,
    upload_expiry,
    window_seconds,
)

CAP = 100


def request(custom_id: str = "req-1", url: str = "/v1/chat/completions", **body: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": url,
        "body": body or {"model": "tiny-llm", "messages": [{"role": "user", "content": "hi"}]},
    }


def jsonl(*items: object) -> bytes:
    return "".join(json.dumps(item) + "\n" for item in items).encode()


def refusal(content: bytes, max_lines: int = CAP) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as raised:
        parse_input_file(content, max_lines)
    error = raised.value
    assert error.status_code == 400
    assert error.param == "file" and error.code == "invalid_batch_file"
    assert error.message.startswith("Invalid batch input file: ")
    return error


# -- jobs.lines: parse_input_file ---------------------------------------------------------------


def test_a_valid_file_gives_every_request_in_order_with_its_line_number() -> None:
    content = jsonl(
        request("a"),
        request("b", "/v1/completions", model="tiny-llm", prompt="once"),
        request("c", "/v1/embeddings", model="embedder", input="text"),
        request("d", "/v1/responses", model="tiny-llm", input="hi"),
    )
    lines = parse_input_file(content, CAP)
    assert [(line.line, line.custom_id, line.url) for line in lines] == [
        (1, "a", "/v1/chat/completions"),
        (2, "b", "/v1/completions"),
        (3, "c", "/v1/embeddings"),
        (4, "d", "/v1/responses"),
    ]
    assert json.loads(lines[1].body) == {"model": "tiny-llm", "prompt": "once"}
    assert all(isinstance(line, InputLine) for line in lines)


def test_blank_lines_are_skipped_but_counted_and_a_last_line_needs_no_newline() -> None:
    first, second = json.dumps(request("a")), json.dumps(request("b"))
    content = f"\n{first}\n   \n\t\n\r\n{second}".encode()
    lines = parse_input_file(content, CAP)
    assert [(line.line, line.custom_id) for line in lines] == [(2, "a"), (6, "b")]


def test_crlf_line_ends_are_read_as_lines() -> None:
    content = (json.dumps(request("a")) + "\r\n" + json.dumps(request("b")) + "\r\n").encode()
    assert [(line.line, line.custom_id) for line in parse_input_file(content, CAP)] == [(1, "a"), (2, "b")]


@pytest.mark.parametrize("content", [b"", b"\n\n", b"  \r\n \n"])
def test_a_file_without_requests_is_refused(content: bytes) -> None:
    assert "holds no requests" in refusal(content).message


def test_an_error_names_the_first_bad_line_by_its_number_in_the_file() -> None:
    content = jsonl(request("a")) + b"\n" + jsonl(request("b"), {"custom_id": "c"}, "not even an object")
    message = refusal(content).message
    assert "line 4:" in message and "method must be 'POST'" in message


def test_a_custom_id_used_twice_is_refused_at_its_second_line() -> None:
    message = refusal(jsonl(request("a"), request("b"), request("a"))).message
    assert "line 3: custom_id 'a' is used by an earlier line" in message


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ({"method": "POST", "url": "/v1/completions", "body": {}}, "custom_id must be a non-empty string"),
        ({**request(), "custom_id": ""}, "custom_id must be a non-empty string"),
        ({**request(), "custom_id": 7}, "custom_id must be a non-empty string"),
        ({**request(), "custom_id": "x" * (MAX_CUSTOM_ID + 1)}, f"longer than {MAX_CUSTOM_ID} characters"),
        ({**request(), "method": "GET"}, "method must be 'POST', got 'GET'"),
        ({**request(), "method": "post"}, "method must be 'POST', got 'post'"),
        ({k: v for k, v in request().items() if k != "method"}, "method must be 'POST', got None"),
        ({**request(), "url": "/v1/models"}, "url must be one of"),
        ({**request(), "url": "/v1/chat/completions/"}, "url must be one of"),
        ({**request(), "url": "https://api.openai.com/v1/chat/completions"}, "url must be one of"),
        ({**request(), "body": "not an object"}, "body must be a JSON object"),
        ({**request(), "body": [{"model": "m"}]}, "body must be a JSON object"),
        ({k: v for k, v in request().items() if k != "body"}, "body must be a JSON object"),
        (request(model="m", stream=True), "stream is not supported"),
        (request(model="m", stream="yes"), "stream is not supported"),
        ({**request(), "headers": {}}, "unknown field(s) headers"),
    ],
)
def test_a_bad_envelope_is_refused_with_the_reason(item: dict[str, Any], says: str) -> None:
    message = refusal(jsonl(request("first"), item)).message
    assert "line 2" in message and says in message


def test_a_custom_id_at_the_cap_and_stream_false_or_null_are_taken() -> None:
    content = jsonl(
        request("x" * MAX_CUSTOM_ID), request("b", model="m", stream=False), request("c", model="m", stream=None)
    )
    assert [line.line for line in parse_input_file(content, CAP)] == [1, 2, 3]


def test_every_batch_endpoint_is_a_route_a_line_may_name() -> None:
    content = jsonl(*(request(f"r{i}", url) for i, url in enumerate(BATCH_ENDPOINTS)))
    assert [line.url for line in parse_input_file(content, CAP)] == list(BATCH_ENDPOINTS)


def test_a_file_that_is_not_utf8_is_refused_with_the_byte() -> None:
    good = jsonl(request("a"))
    message = refusal(good + b'{"custom_id": "\xff"}\n').message
    assert f"not UTF-8 (byte {len(good) + 15})" in message


@pytest.mark.parametrize(
    "raw", ['{"custom_id": "a",', "{'custom_id': 'a'}", "[" * 100_000, '{"a": "raw \x01 control"}']
)
def test_a_line_that_is_not_json_is_refused(raw: str) -> None:
    message = refusal(jsonl(request("a")) + raw.encode() + b"\n").message
    assert "line 2 is not JSON" in message


@pytest.mark.parametrize("raw", ["[1, 2]", '"text"', "42", "null"])
def test_a_line_that_is_json_but_not_an_object_is_refused(raw: str) -> None:
    assert "line 1 is not a JSON object" in refusal(raw.encode()).message


def test_max_lines_requests_are_taken_and_one_more_is_refused() -> None:
    items = [request(f"r{i}") for i in range(5)]
    assert len(parse_input_file(jsonl(*items) + b"\n\n\n", 5)) == 5  # blank lines are not requests
    assert "more than 4 requests" in refusal(jsonl(*items), 4).message


def test_big_integers_unicode_and_escapes_survive_as_the_same_values() -> None:
    body = {
        "model": "tiny-llm",
        "seed": 2**80 + 1,
        "logit_bias": {"-1": -(2**70)},
        "temperature": 0.1,
        "messages": [{"role": "user", "content": '🦙 中文 e\u0301 \u2028 line sep \u2029 "quoted" \\ tab\t'}],
        "metadata": {"ÿ-key ✓": None, "nested": [True, False, [], {}]},
    }
    custom_id = 'id with "quotes", ✓ and \u2028'
    raw = json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body})
    # unescaped too: the file may hold U+2028 and emoji as raw UTF-8 bytes, which are not line ends
    raw_utf8 = json.dumps(
        {"custom_id": "raw", "method": "POST", "url": "/v1/chat/completions", "body": body}, ensure_ascii=False
    )
    first, second = parse_input_file(f"{raw}\n{raw_utf8}\n".encode(), CAP)
    assert first.custom_id == custom_id and second.line == 2
    for line in (first, second):
        kept = json.loads(line.body)
        assert kept == body
        assert isinstance(kept["seed"], int) and kept["seed"] == 2**80 + 1
        assert list(kept) == list(body)  # key order kept


# -- plan.batches -------------------------------------------------------------------------------


@pytest.mark.parametrize(("window", "seconds"), [("24h", 86400.0), ("1h", 3600.0), (f"{MAX_WINDOW_HOURS}h", 604800.0)])
def test_a_completion_window_in_whole_hours_is_taken(window: str, seconds: float) -> None:
    assert window_seconds(window) == seconds


@pytest.mark.parametrize("window", ["0h", f"{MAX_WINDOW_HOURS + 1}h", "24", "1d", "01h", "24H", "1.5h", "-1h", ""])
def test_any_other_completion_window_is_refused(window: str) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        window_seconds(window)
    assert raised.value.param == "completion_window"


def create(**overrides: Any) -> BatchCreateRequest:
    fields: dict[str, Any] = {
        "input_file_id": "file-abc",
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        **overrides,
    }
    return BatchCreateRequest.model_validate(fields)


def test_check_batch_gives_the_window_and_refuses_an_endpoint_no_line_may_name() -> None:
    assert check_batch(create()) == 86400.0
    assert check_batch(create(endpoint="/v1/embeddings", completion_window="2h")) == 7200.0
    with pytest.raises(InvalidRequestError) as raised:
        check_batch(create(endpoint="/v1/models"))
    assert raised.value.param == "endpoint"


def test_a_creation_body_with_an_unknown_field_or_a_zero_concurrency_is_refused() -> None:
    with pytest.raises(ValidationError):
        create(completion_windows="24h")
    with pytest.raises(ValidationError):
        create(max_concurrency=0)
    assert create(max_concurrency=1).max_concurrency == 1


def test_metadata_at_its_caps_is_taken() -> None:
    check_metadata(None)
    check_metadata({})
    check_metadata({f"k{i}": "v" for i in range(METADATA_PAIRS)})
    check_metadata({"k" * METADATA_KEY_CHARS: "v" * METADATA_VALUE_CHARS})
    assert check_batch(create(metadata={"team": "search"})) == 86400.0


@pytest.mark.parametrize(
    "metadata",
    [
        {f"k{i}": "v" for i in range(METADATA_PAIRS + 1)},
        {"k" * (METADATA_KEY_CHARS + 1): "v"},
        {"k": "v" * (METADATA_VALUE_CHARS + 1)},
    ],
)
def test_metadata_over_its_caps_is_refused(metadata: dict[str, str]) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        check_metadata(metadata)
    assert raised.value.param == "metadata"
    with pytest.raises(InvalidRequestError):
        check_batch(create(metadata=metadata))


def test_expires_after_takes_created_at_and_an_hour_to_thirty_days() -> None:
    low, high = FILE_EXPIRY_SECONDS
    assert (low, high) == (3600, 30 * 24 * 3600)
    for seconds in (low, 86400, high):
        assert expiry_seconds(ExpiresAfter(anchor="created_at", seconds=seconds), "p") == seconds
    for anchor, seconds in (("created_at", low - 1), ("created_at", high + 1), ("last_active_at", low)):
        with pytest.raises(InvalidRequestError) as raised:
            expiry_seconds(ExpiresAfter(anchor=anchor, seconds=seconds), "output_expires_after")
        assert raised.value.param == "output_expires_after"
    with pytest.raises(InvalidRequestError):
        check_batch(create(output_expires_after={"anchor": "created_at", "seconds": 60}))
    assert check_batch(create(output_expires_after={"anchor": "created_at", "seconds": 7200})) == 86400.0


def test_an_uploads_expires_after_fields() -> None:
    assert upload_expiry(None, None) is None
    assert upload_expiry("created_at", "3600") == 3600
    for anchor, seconds in (
        ("created_at", None),
        ("created_at", "-3600"),
        ("created_at", "1h"),
        ("created_at", "3600.0"),
        ("created_at", "60"),
        (None, "3600"),
        ("other", "3600"),
    ):
        with pytest.raises(InvalidRequestError) as raised:
            upload_expiry(anchor, seconds)
        assert raised.value.param == "expires_after"


@pytest.mark.parametrize("seconds", ["3600\u00b2", "\u00b3", "\u2460"])
def test_an_uploads_expiry_in_digits_int_does_not_read_is_a_400(seconds: str) -> None:
    """``str.isdigit`` takes superscripts and circled digits, which ``int`` refuses."""
    with pytest.raises(InvalidRequestError) as raised:
        upload_expiry("created_at", seconds)
    assert raised.value.param == "expires_after"


def test_only_the_batch_purpose_is_taken() -> None:
    check_purpose("batch")
    for purpose in (None, "fine-tune", "assistants", "batch_output", ""):
        with pytest.raises(InvalidRequestError) as raised:
            check_purpose(purpose)
        assert raised.value.param == "purpose"


# -- openai.batches_encode ----------------------------------------------------------------------


FILE_FIELDS = {"id", "object", "bytes", "created_at", "expires_at", "filename", "purpose", "status", "status_details"}
BATCH_FIELDS = {
    "id",
    "object",
    "endpoint",
    "errors",
    "input_file_id",
    "completion_window",
    "status",
    "output_file_id",
    "error_file_id",
    "created_at",
    "in_progress_at",
    "expires_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
    "request_counts",
    "metadata",
}


def test_a_file_object_has_openais_fields_and_parses_as_the_sdks_file_object() -> None:
    record = FileRecord("file-1", "key:a", "batch", "in.jsonl", 1234, 1_700_000_000.75, 1_700_086_400.5)
    encoded = file_object(record)
    assert set(encoded) == FILE_FIELDS
    assert encoded["created_at"] == 1_700_000_000 and encoded["expires_at"] == 1_700_086_400
    assert "key:a" not in json.dumps(encoded)  # the owner is never shown
    parsed = FileObject.model_validate(encoded)
    assert (parsed.id, parsed.bytes, parsed.purpose, parsed.filename) == ("file-1", 1234, "batch", "in.jsonl")
    output = file_object(FileRecord("file-2", "", "batch_output", "b_output.jsonl", 9, 1.0, None))
    assert output["expires_at"] is None and FileObject.model_validate(output).purpose == "batch_output"
    deleted = FileDeleted.model_validate(file_deleted("file-1"))
    assert (deleted.id, deleted.deleted, deleted.object) == ("file-1", True, "file")


def test_a_batch_object_has_openais_fields_and_parses_as_the_sdks_batch() -> None:
    record = BatchRecord(
        id="batch_1",
        owner="key:a",
        endpoint="/v1/chat/completions",
        input_file_id="file-1",
        completion_window="24h",
        status="completed",
        created_at=100.9,
        expires_at=86500.2,
        max_concurrency=4,
        metadata={"team": "search"},
        times={"in_progress": 100.9, "finalizing": 200.5, "completed": 201.0},
        counts=RequestCounts(3, 2, 1),
        output_file_id="file-out",
        error_file_id="file-err",
    )
    encoded = batch_object(record)
    assert set(encoded) == BATCH_FIELDS
    assert encoded["in_progress_at"] == 100 and encoded["finalizing_at"] == 200 and encoded["completed_at"] == 201
    assert encoded["cancelled_at"] is None and encoded["failed_at"] is None and encoded["expired_at"] is None
    assert encoded["request_counts"] == {"total": 3, "completed": 2, "failed": 1}
    assert "key:a" not in json.dumps(encoded) and "max_concurrency" not in encoded
    parsed = Batch.model_validate(encoded)
    assert parsed.status == "completed" and parsed.metadata == {"team": "search"}
    assert parsed.request_counts is not None and parsed.request_counts.failed == 1
    assert (parsed.output_file_id, parsed.error_file_id) == ("file-out", "file-err")


def test_a_fresh_batch_object_has_nulls_where_nothing_happened_yet() -> None:
    record = BatchRecord("batch_2", "", "/v1/embeddings", "file-1", "1h", "in_progress", 5.0, 3605.0, 8)
    encoded = batch_object(record)
    assert encoded["metadata"] is None and encoded["output_file_id"] is None and encoded["errors"] is None
    assert all(encoded[f"{name}_at"] is None for name in ("in_progress", "finalizing", "completed", "cancelled"))
    assert encoded["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
    assert Batch.model_validate(encoded).status == "in_progress"


def test_a_list_is_openais_cursor_page() -> None:
    items = [{"id": "a"}, {"id": "b"}]
    assert object_list(items, True) == {
        "object": "list",
        "data": items,
        "first_id": "a",
        "last_id": "b",
        "has_more": True,
    }
    assert object_list([], False) == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }
