"""``bench batch``'s pure helpers: the input file it uploads, the gauges it reads, and the batch's
progress from its reads."""

from __future__ import annotations

import json

import pytest

from bench.batch import Probe, input_file, line_rate, metric, progress, throughout, verdict
from gateway.jobs.lines import parse_input_file


def test_the_input_file_is_one_the_gateway_takes_every_line_a_chat_request_to_its_token_cap() -> None:
    lines = parse_input_file(input_file(5, 16), max_lines=5)
    assert [line.custom_id for line in lines] == [f"line-{n}" for n in range(5)]
    assert {line.url for line in lines} == {"/v1/chat/completions"}
    body = json.loads(lines[0].body)
    assert body["max_tokens"] == 16 and body["ignore_eos"] is True and "stream" not in body


def test_metric_sums_the_series_whose_labels_match() -> None:
    page = "\n".join(
        [
            "# HELP gateway_requests_running Requests holding a slot",
            'gateway_requests_running{model="tiny-llm"} 3.0',
            'gateway_requests_running{model="other"} 5.0',
            'gateway_requests_shed_total{band="1",model="tiny-llm",reason="sheddable"} 7.0',
            'gateway_requests_shed_total{band="1",model="tiny-llm",reason="timeout"} 1.0',
            'gateway_requests_shed_created{band="1",model="tiny-llm",reason="timeout"} 1.7e9',
            "gateway_batch_lines_running 8.0",
        ]
    )
    assert metric(page, "gateway_requests_running", model="tiny-llm") == 3.0
    assert metric(page, "gateway_requests_running") == 8.0
    assert metric(page, "gateway_requests_shed_total", model="tiny-llm") == 8.0
    assert metric(page, "gateway_batch_lines_running") == 8.0
    assert metric(page, "gateway_batch_lines") == 0.0  # a prefix of another name is not that name


def probe(at: float, status: str, completed: int, total: int = 100) -> Probe:
    return Probe(at, 0.0, 0.0, 0.0, status, completed, 0, total)


def test_the_rate_stops_at_the_first_read_that_saw_the_batch_done() -> None:
    probes = [probe(0.0, "in_progress", 10), probe(1.0, "in_progress", 50), probe(2.0, "completed", 100)]
    probes.append(probe(9.0, "completed", 100))  # waiting after the end does not dilute the rate
    assert progress(probes) == (90, 2.0)
    assert line_rate(probes) == 45.0
    assert line_rate(probes[:1]) is None


def test_a_batch_runs_throughout_only_if_every_read_saw_it_in_progress_with_lines_left() -> None:
    assert throughout([probe(0.0, "in_progress", 0), probe(1.0, "in_progress", 99)])
    assert not throughout([probe(0.0, "in_progress", 0), probe(1.0, "in_progress", 100)])
    assert not throughout([probe(0.0, "in_progress", 0), probe(1.0, "finalizing", 100)])
    assert not throughout([])


def test_the_verdict_pairs_each_round_and_fails_when_the_batch_stopped() -> None:
    def phase(p50: float, ran: bool | None = None) -> dict[str, object]:
        figures: dict[str, object] = {"ttft_p50_ms": p50, "ttft_p99_ms": p50 * 4, "tokens_per_s": 100.0, "errors": 0}
        return figures if ran is None else figures | {"batch_ran_throughout": ran}

    rounds = [{"alone": phase(10.0), "batch": phase(12.0, True)}, {"alone": phase(20.0), "batch": phase(28.0, True)}]
    side = {"tokens_per_s": 90.0}
    good = verdict(rounds, {"tokens_per_s": 100.0}, side)
    assert good["ttft_p50_ratio"] == pytest.approx(1.3)  # the median of 1.2 and 1.4, not 20 / 15 of the medians
    assert good["within"] and good["batch_over_direct"] == 0.9
    rounds[1]["batch"] = phase(28.0, False)
    assert not verdict(rounds, {"tokens_per_s": 100.0}, side)["within"]
