"""RequestOutcome: each request is counted once, with the status and reason of how it ended."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace

import pytest

from gateway.core.admission import Admission
from gateway.core.assemble import Usage
from gateway.core.outcome import RequestOutcome
from gateway.errors import BackendError, BackendTimeoutError, RateLimitError, ShuttingDownError
from gateway.metrics import GAP_FLUSH_EVERY, LATENCY_BUCKETS, Metrics
from tests.plans import make_plan


def metrics() -> Metrics:
    return Metrics(Admission(lambda model: (1, 1), 1.0))


def sample(m: Metrics, name: str, **labels: str) -> float:
    value = m.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def requests_total(m: Metrics, status: str) -> float:
    return sample(m, "gateway_requests_total", model="m", adapter="", endpoint="chat", stream="true", status=status)


def test_only_the_first_finish_counts() -> None:
    m = metrics()
    outcome = RequestOutcome(make_plan(), m, log=False)
    outcome.succeed(Usage(3, 2), stopped_early=False)
    outcome.fail(BackendError("late"))
    outcome.abandon()
    assert outcome.finished and outcome.record.status == 200
    assert requests_total(m, "200") == 1 and requests_total(m, "500") == 0 and requests_total(m, "499") == 0
    assert sample(m, "gateway_completion_tokens_total", model="m", adapter="") == 2


def test_stop_string_end_is_a_200_with_a_cancellation() -> None:
    m = metrics()
    outcome = RequestOutcome(make_plan(), m, log=False)
    outcome.succeed(Usage(1, 1), stopped_early=True)
    assert outcome.record.cancel_reason == "stop_string"
    assert sample(m, "gateway_cancellations_total", reason="stop_string") == 1


@pytest.mark.parametrize(
    ("exc", "started", "status", "reason", "error_type"),
    [
        (asyncio.CancelledError(), True, 499, "client_disconnect", None),
        (asyncio.CancelledError(), False, 499, "client_disconnect", None),
        (GeneratorExit(), True, 499, "client_disconnect", None),
        (BackendTimeoutError("late"), True, 504, "deadline", "timeout_error"),
        (BackendTimeoutError("late in the queue"), False, 504, "deadline", None),
        (ShuttingDownError("bye"), True, 503, "shutdown", "service_unavailable"),
        (ShuttingDownError("bye, nothing was running"), False, 503, None, None),
        (RateLimitError("full"), False, 429, None, None),
        (BackendError("model failed"), True, 500, None, "server_error"),
        (RuntimeError("a bug"), True, 500, None, None),
    ],
)
def test_failures_map_to_status_reason_and_error_type(
    exc: BaseException, started: bool, status: int, reason: str | None, error_type: str | None
) -> None:
    m = metrics()
    outcome = RequestOutcome(make_plan(), m, log=False)
    outcome.backend_started = started
    outcome.fail(exc)
    record = outcome.record
    assert (record.status, record.cancel_reason, record.error_type) == (status, reason, error_type)
    assert requests_total(m, str(status)) == 1
    assert sample(m, "gateway_cancellations_total", reason=reason or "") == (1 if reason else 0)
    if error_type is not None:
        assert sample(m, "gateway_backend_errors_total", type=error_type) == 1


def test_responded_sets_first_token_then_observes_each_gap() -> None:
    m = metrics()
    outcome = RequestOutcome(make_plan(), m, log=False)
    outcome.responded()
    first = outcome.record.first_token
    assert first is not None and outcome.record.last_token == first
    assert sample(m, "gateway_inter_token_latency_seconds_count", model="m") == 0
    outcome.responded()
    outcome.responded()
    assert outcome.record.first_token == first and outcome.record.last_token > first  # type: ignore[operator]
    outcome.succeed(Usage(1, 3), stopped_early=False)
    assert sample(m, "gateway_inter_token_latency_seconds_count", model="m") == 2  # flushed at the end
    assert sample(m, "gateway_time_to_first_token_seconds_count", model="m") == 1


def test_a_long_stream_shows_its_gaps_before_it_ends() -> None:
    m = metrics()
    outcome = RequestOutcome(make_plan(), m, log=False)
    for _ in range(GAP_FLUSH_EVERY + 1):  # the first response is the first token, not a gap
        outcome.responded()
    assert sample(m, "gateway_inter_token_latency_seconds_count", model="m") == GAP_FLUSH_EVERY
    outcome.responded()
    outcome.abandon()
    assert sample(m, "gateway_inter_token_latency_seconds_count", model="m") == GAP_FLUSH_EVERY + 1


def test_tallied_gaps_fill_the_same_buckets_and_sum_as_observing_each() -> None:
    gaps = [0.0, 0.0005, 0.001, 0.0011, 0.003, 0.01, 0.02, 0.7, 59.0, 61.0, 1e9] * 9  # 99: one flush + the rest
    tallied, observed = metrics(), metrics()
    tally = tallied.gap_tally("m")
    series = observed.inter_token_latency.labels("m")
    for gap in gaps:
        tally.add(gap)
        series.observe(gap)
    tally.flush()
    tally.flush()  # nothing pending: adds nothing
    want = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in observed.registry.collect() for s in f.samples}
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in tallied.registry.collect() for s in f.samples}
    names = [k for k in want if k[0].startswith("gateway_inter_token_latency_seconds") and "created" not in k[0]]
    assert len(names) == len(LATENCY_BUCKETS) + 1 + 2  # buckets with +Inf, count, sum
    for key in names:
        assert got[key] == pytest.approx(want[key]), key


def test_request_log_line_is_written_once_with_the_outcome(caplog: pytest.LogCaptureFixture) -> None:
    outcome = RequestOutcome(make_plan(request_id="abc"), metrics(), log=True)
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        outcome.fail(BackendTimeoutError("late"), Usage(5, 1))
        outcome.succeed(Usage(5, 2), stopped_early=False)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]
    assert len(lines) == 1
    line = lines[0]
    assert set(line) == {
        "request_id",
        "trace_id",
        "endpoint",
        "key",
        "model",
        "adapter",
        "priority",
        "queue_ms",
        "stream",
        "status",
        "prompt_tokens",
        "completion_tokens",
        "duration_ms",
        "ttft_ms",
        "cancel_reason",
        "error_type",
        "replica",
        "route",
    }
    assert (line["request_id"], line["status"], line["cancel_reason"], line["prompt_tokens"]) == (
        "abc",
        504,
        "deadline",
        5,
    )


def test_no_log_line_unless_asked(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        RequestOutcome(make_plan(), metrics(), log=False).abandon()
    assert not [r for r in caplog.records if r.name == "gateway.access"]


def test_a_non_streaming_request_has_a_first_token_time_but_no_gaps() -> None:
    m = metrics()
    outcome = RequestOutcome(make_plan(stream=False), m, log=False)
    outcome.responded()
    outcome.responded()
    assert outcome.record.first_token is not None
    assert sample(m, "gateway_inter_token_latency_seconds_count", model="m") == 0


def test_each_label_set_is_counted_in_its_own_series() -> None:
    """``Metrics.finish`` keeps each label set's series after the first lookup: requests that
    differ in any label still land in their own."""
    m = metrics()
    ends = [("m", None, True, 200), ("m", None, True, 200), ("m", "a", True, 200), ("m", None, False, 200)]
    ends += [("m", None, True, 500), ("other", None, True, 200)]
    for model, adapter, stream, status in ends:
        requests = tuple(replace(r, model=model) for r in make_plan().requests)
        outcome = RequestOutcome(make_plan(stream=stream, adapter=adapter, requests=requests), m, log=False)
        if status == 500:
            outcome.fail(BackendError("x"))
        else:
            outcome.succeed(Usage(2, 1), stopped_early=False)

    def count(model: str, adapter: str, stream: str, status: str) -> float:
        labels = {"model": model, "adapter": adapter, "endpoint": "chat", "stream": stream, "status": status}
        return sample(m, "gateway_requests_total", **labels)

    assert count("m", "", "true", "200") == 2
    assert count("m", "a", "true", "200") == 1
    assert count("m", "", "false", "200") == 1
    assert count("m", "", "true", "500") == 1
    assert count("other", "", "true", "200") == 1
    assert sample(m, "gateway_completion_tokens_total", model="m", adapter="") == 3
    assert sample(m, "gateway_completion_tokens_total", model="m", adapter="a") == 1
    assert sample(m, "gateway_request_duration_seconds_count", model="other", endpoint="chat") == 1


class Spent:
    """A running request's usage so far, as the assembler reports it."""

    def __init__(self) -> None:
        self.usage = Usage(0, 0)


def test_a_keys_tokens_are_charged_as_they_are_spent_and_the_rest_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.core import outcome as outcome_module
    from gateway.keys.context import RequestKey, current_key
    from gateway.keys.limits import MemoryLimits
    from gateway.keys.policy import KeyPolicy

    charges: list[int] = []
    limits = MemoryLimits()
    monkeypatch.setattr(limits, "charge", lambda policy, tokens: charges.append(tokens))
    monkeypatch.setattr(outcome_module, "CHARGE_INTERVAL", 0.0)
    m = metrics()
    token = current_key.set(RequestKey(KeyPolicy("team", tpm=100), limits))
    try:
        outcome = RequestOutcome(make_plan(), m, log=False)
    finally:
        current_key.reset(token)
    spent = Spent()
    spent.usage = Usage(5, 2)
    outcome.responded(spent)
    outcome.responded(spent)  # nothing new: no charge
    spent.usage = Usage(5, 6)
    outcome.responded(spent)
    outcome.succeed(Usage(5, 9), stopped_early=False)
    assert charges == [7, 4, 3]
    assert outcome.record.key == "team"
    assert sample(m, "gateway_key_completion_tokens_total", key="team", model="m") == 9
    assert sample(m, "gateway_key_requests_total", key="team", model="m", status="200") == 1
