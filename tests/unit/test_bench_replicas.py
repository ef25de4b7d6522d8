"""``bench replicas``' pure parts: the strikes' schedule and victims, what a stream's record says,
the Prometheus pages it reads (migrations, their histogram, the prefix counters), the slow
replica's shares, the conversations and the verdicts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from bench.replicas import parse_phases, slow_seconds
from bench.replicas_fleet import (
    Histogram,
    ReplicaConnection,
    StreamRecord,
    chat_prompt,
    chat_request,
    model_copy,
    on_tokens,
    settings_field,
    total,
)
from bench.replicas_prefix import hit_figures, make_workload, split_sessions
from bench.replicas_prefix import verdict as prefix_verdict
from bench.replicas_slow import replica_rows, shares
from bench.replicas_slow import verdict as slow_verdict
from bench.replicas_strikes import (
    Struck,
    chaos_schedule,
    choose_victim,
    first_difference,
    migration_figures,
    outcome,
    pick_sample,
    struck_by,
    struck_while_running,
    summarize_streams,
)
from bench.stack import Variant

# --------------------------------------------------------------------------- the chaos schedule


def test_the_schedule_is_the_seeds_strikes_ten_to_twenty_seconds_apart_half_kills_half_drains() -> None:
    schedule = chaos_schedule(7, 120.0)
    assert schedule == chaos_schedule(7, 120.0)
    assert schedule != chaos_schedule(8, 120.0)
    times = [s.at for s in schedule]
    assert 10.0 <= times[0] <= 20.0 and times[-1] < 120.0
    assert all(10.0 - 1e-3 <= b - a <= 20.0 + 1e-3 for a, b in zip(times, times[1:], strict=False))
    kinds = [s.how for s in schedule]
    assert set(kinds) == {"kill", "drain"} and abs(kinds.count("kill") - kinds.count("drain")) <= 1
    assert all(0.0 <= s.draw < 1.0 for s in schedule)


def test_a_window_shorter_than_the_first_interval_strikes_nothing() -> None:
    assert chaos_schedule(1, 5.0) == []


def test_the_victim_is_the_draws_pick_among_the_replicas_serving_while_another_is_left() -> None:
    assert choose_victim([2, 0, 1], [0, 1, 2], 0.0) == 0
    assert choose_victim([2, 0, 1], [0, 1, 2], 0.5) == 1
    assert choose_victim([2, 0, 1], [0, 1, 2], 0.999) == 2
    assert choose_victim([0, 2], [0, 2], 0.9) == 2
    # replica 2 is back, but the gateway still has it ejected: it serves nothing, so it is not struck
    assert choose_victim([0, 1, 2], [0, 1], 0.99) == 1
    assert choose_victim([0, 2], [0, 1, 2], 0.99) == 2  # 1 is down: the gateway's view lags
    assert choose_victim([0, 2], [0], 0.0) is None  # 0 is the only one serving: it stays
    assert choose_victim([1], [1], 0.3) is None
    assert choose_victim([], [0, 1], 0.3) is None


# --------------------------------------------------------------------------- what the streams said


def record(
    index: int, replica: str, sent: float, done: float | None, *, gap: float = 0.01, **fields: object
) -> StreamRecord:
    values: dict[str, object] = {"saw_done": True, "finish_reason": "length", "usage_tokens": 300} | fields
    r = StreamRecord(sent, index=index, replica=replica, done=done, max_gap=gap, content=["text"])
    for key, value in values.items():
        setattr(r, key, value)
    return r


def test_a_stream_is_completed_only_with_a_finish_reason_done_and_no_error() -> None:
    assert outcome(record(0, "a", 0, 1)) == "completed"
    assert outcome(record(0, "a", 0, 1, error="{'message': 'x'}")) == "error event"
    assert outcome(record(0, "a", 0, 1, error="ConnectionError", failure="transport")) == "transport"
    assert outcome(record(0, "a", 0, 1, error="HTTP 503", failure="HTTP status")) == "HTTP status"
    assert outcome(record(0, "a", 0, None, saw_done=False)) == "no [DONE]"
    assert outcome(record(0, "a", 0, 1, finish_reason=None)) == "no finish_reason"


def test_a_kill_under_a_stream_outranks_a_drain() -> None:
    strikes = [Struck(10.0, "drain", "a", time=5.0), Struck(20.0, "kill", "a", time=7.0)]
    assert struck_by(record(0, "a", 4.0, 8.0), strikes) == "kill"
    assert struck_by(record(0, "a", 4.0, 6.0), strikes) == "drain"
    assert struck_by(record(0, "a", 8.0, 9.0), strikes) is None


def test_a_stream_is_struck_when_its_own_replica_was_struck_while_it_ran() -> None:
    strikes = [Struck(10.0, "kill", "a", time=5.0)]
    assert struck_while_running(record(0, "a", 4.0, 6.0), strikes)
    assert struck_while_running(record(0, "a", 4.0, None, saw_done=False), strikes)  # never ended
    assert not struck_while_running(record(0, "b", 4.0, 6.0), strikes)  # another replica's
    assert not struck_while_running(record(0, "a", 5.5, 6.0), strikes)  # started after
    assert not struck_while_running(record(0, "a", 1.0, 4.5), strikes)  # ended before
    assert not struck_while_running(record(0, "a", 4.0, 6.0), [Struck(10.0, "kill", None, time=5.0)])


def test_the_summary_counts_lost_streams_by_kind_and_splits_the_gaps_by_what_struck_them() -> None:
    strikes = [Struck(10.0, "drain", "a", time=5.0), Struck(20.0, "kill", "b", time=6.5)]
    records = [
        record(0, "a", 4.0, 8.0, gap=0.9),  # struck, went on elsewhere
        record(1, "a", 4.5, 9.0, gap=0.5),
        record(2, "b", 4.0, 6.0, gap=0.02),
        record(3, "b", 6.0, 7.0, gap=0.03, usage_tokens=299),  # killed under it
        record(6, "c", 4.0, 7.0, gap=0.04),
        record(4, "a", 4.0, 5.1, error="gone", failure="transport"),
        record(5, "a", 4.0, 5.1, error="{'message': 'replica failed'}"),
        record(7, "c", 4.0, 4.1, error="HTTP 503: none", failure="HTTP status"),
        record(8, "c", 4.2, 4.3, error="HTTP 503: none", failure="HTTP status"),
    ]
    summary = summarize_streams(records, strikes, 300)
    assert (summary["started"], summary["completed"], summary["lost"], summary["refused"]) == (9, 5, 2, 2)
    assert summary["lost_by_kind"] == {"transport": 1, "error event": 1}
    assert summary["failure_samples"] == [
        "transport: gone",
        "error event: {'message': 'replica failed'}",
        "HTTP status: HTTP 503: none",
    ]
    assert summary["struck_streams"] == 5 and summary["usage_wrong"] == 1
    gaps = summary["gaps"]
    assert gaps["drain"]["streams"] == 2 and gaps["drain"]["max_gap_max_ms"] == pytest.approx(900.0)
    assert gaps["kill"]["streams"] == 1 and gaps["kill"]["max_gap_p50_ms"] == pytest.approx(30.0)
    assert gaps["None"]["streams"] == 2 and gaps["None"]["max_gap_p50_ms"] == pytest.approx(30.0)


def test_the_sample_to_ask_again_takes_completed_struck_streams_first() -> None:
    strikes = [Struck(10.0, "kill", "a", time=5.0)]
    struck = [record(i, "a", 4.0, 6.0) for i in range(3)]
    spared = [record(10 + i, "b", 4.0, 6.0) for i in range(5)]
    lost = [record(20, "a", 4.0, 6.0, error="x")]
    sample = pick_sample(spared + lost + struck, strikes, 5, seed=3)
    assert {r.index for r in sample[:3]} == {0, 1, 2} and len(sample) == 5
    assert all(r.index < 20 for r in sample)
    assert [r.index for r in sample] == [r.index for r in pick_sample(spared + lost + struck, strikes, 5, seed=3)]


def test_first_difference() -> None:
    assert first_difference("abcd", "abXd") == 2
    assert first_difference("abc", "abcdef") == 3
    assert first_difference("same", "same") == 4


# --------------------------------------------------------------------------- Prometheus pages

BEFORE = """\
# TYPE gateway_stream_migrations_total counter
gateway_stream_migrations_total{outcome="continued",replica="a"} 2.0
gateway_stream_migration_seconds_bucket{le="0.05"} 1.0
gateway_stream_migration_seconds_bucket{le="0.1"} 2.0
gateway_stream_migration_seconds_bucket{le="0.5"} 2.0
gateway_stream_migration_seconds_bucket{le="+Inf"} 2.0
gateway_stream_migration_seconds_sum 0.1
gateway_stream_migration_seconds_count 2.0
"""
AFTER = """\
gateway_stream_migrations_total{outcome="continued",replica="a"} 7.0
gateway_stream_migrations_total{outcome="continued",replica="b"} 5.0
gateway_stream_migrations_total{outcome="failed",replica="a"} 1.0
gateway_stream_migrations_created{outcome="failed",replica="a"} 1.7e9
gateway_stream_migration_seconds_bucket{le="0.05"} 1.0
gateway_stream_migration_seconds_bucket{le="0.1"} 7.0
gateway_stream_migration_seconds_bucket{le="0.5"} 11.0
gateway_stream_migration_seconds_bucket{le="+Inf"} 12.0
gateway_stream_migration_seconds_sum 2.1
gateway_stream_migration_seconds_count 12.0
"""


def test_total_sums_the_samples_whose_labels_match_and_no_other_name() -> None:
    assert total(AFTER, "gateway_stream_migrations_total") == 13.0
    assert total(AFTER, "gateway_stream_migrations_total", outcome="continued") == 12.0
    assert total(AFTER, "gateway_stream_migrations_total", outcome="not_continuable") == 0.0
    assert total(AFTER, "gateway_stream_migration_seconds_count") == 12.0
    assert total(AFTER, "gateway_stream_migration") == 0.0


def test_the_histograms_quantile_interpolates_within_its_bucket_as_prometheus_does() -> None:
    h = Histogram(((0.1, 5.0), (0.5, 10.0), (float("inf"), 10.0)), 1.5, 10.0)
    assert h.mean == pytest.approx(0.15)
    assert h.quantile(0.5) == pytest.approx(0.1)
    assert h.quantile(0.75) == pytest.approx(0.3)
    assert h.quantile(0.2) == pytest.approx(0.04)
    assert Histogram(((1.0, 1.0), (float("inf"), 4.0)), 9.0, 4.0).quantile(0.95) == 1.0  # past the last bound
    assert Histogram((), 0.0, 0.0).quantile(0.5) is None and Histogram((), 0.0, 0.0).mean is None


def test_migrations_are_counted_between_two_reads() -> None:
    m = migration_figures(BEFORE, AFTER)
    assert m["migrations"] == {"continued": 10.0, "failed": 1.0, "not_continuable": 0.0}
    assert m["timed"] == 10.0 and m["added_mean_ms"] == pytest.approx(200.0)
    # 10 observed since: 0 under 50 ms, 5 in (50, 100], 4 in (100, 500], 1 above; p95 at rank 9.5
    assert m["added_p95_ms"] == pytest.approx(500.0)
    assert m["exported"] and not migration_figures("", "")["exported"]


# --------------------------------------------------------------------------- the client


def test_the_connection_keeps_the_replica_header_and_the_largest_gap() -> None:
    events = [
        {"choices": [{"delta": {"content": "ab"}, "finish_reason": None}]},
        {"choices": [{"delta": {"content": "cd"}, "finish_reason": "length"}]},
    ]
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    head = b"HTTP/1.1 200 OK\r\nx-gateway-replica: 127.0.0.1:9\r\nx-gateway-route: prefix\r\n"
    head += b"Content-Length: %d\r\n\r\n" % len(body)
    connection = ReplicaConnection()
    connection.record = r = StreamRecord(0.0, content=[])
    connection.on_tokens, connection.stream, connection.token_chars = on_tokens, True, 1
    cut = len(head) + body.index(b"data: {", 10)
    wire = head + body
    for at, piece in ((1.0, wire[:cut]), (1.25, wire[cut:])):
        connection.now = at
        connection.parser.feed_data(piece)
    assert (r.replica, r.route, r.text, r.saw_done, r.finish_reason) == (
        "127.0.0.1:9",
        "prefix",
        "abcd",
        True,
        "length",
    )
    assert r.first == 1.0 and r.max_gap == pytest.approx(0.25)


def test_prompts_are_distinct_and_the_same_in_every_run() -> None:
    assert chat_prompt(3) == chat_prompt(3) != chat_prompt(4)
    assert chat_prompt(3).startswith("Question 3: ")


def test_a_chat_request_carries_its_headers_and_length() -> None:
    raw = chat_request(8000, b'{"a": 1}', {"X-Session-Id": "conv-001"})
    head, body = raw.split(b"\r\n\r\n")
    assert body == b'{"a": 1}' and b"X-Session-Id: conv-001\r\n" in head and head.endswith(b"\r\nContent-Length: 8")


def test_a_trees_settings_are_read_from_its_config(tmp_path: Path) -> None:
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway" / "__init__.py").write_text("")
    (tmp_path / "gateway" / "config.py").write_text('class Settings:\n    triton_url: str = "x"\n')
    variant = Variant.parse(f"old={tmp_path}")
    assert settings_field(variant, "triton_url") and not settings_field(variant, "triton_metrics")
    assert settings_field(Variant.parse(f"this={Path(__file__).resolve().parents[2]}"), "triton_metrics")


def test_the_model_copy_sets_its_parameters_and_links_its_code(tmp_path: Path) -> None:
    repository = model_copy(tmp_path / "repo", "prefix_cache", {"prefill_us_per_char": "200", "cache_blocks": "64"})
    config = (repository / "prefix_cache" / "config.pbtxt").read_text()
    assert 'key: "prefill_us_per_char"\n    value: { string_value: "200" }' in config
    assert 'string_value: "64"' in config and (repository / "prefix_cache" / "1" / "model.py").is_symlink()
    with pytest.raises(RuntimeError, match="no parameter"):
        model_copy(tmp_path / "other", "prefix_cache", {"nope": "1"})


# --------------------------------------------------------------------------- slow, prefix, the phases


def test_the_slow_replica_meets_the_bar_when_its_request_share_follows_its_speed_share() -> None:
    assert shares({"a": 1.0, "b": 3.0}) == {"a": 0.25, "b": 0.75}
    assert shares({"a": 0.0}) == {"a": None}
    replicas = ["s", "f1", "f2"]
    speed = {"s": 100.0, "f1": 450.0, "f2": 450.0}
    rows = replica_rows(replicas, {"s": 11, "f1": 45, "f2": 44}, {"s": 700.0, "f1": 2900.0}, speed, 10.0)
    assert rows[0]["slow"] and not rows[1]["slow"]
    assert rows[0]["request_share"] == pytest.approx(0.11) and rows[0]["speed_share"] == pytest.approx(0.1)
    assert rows[1]["tokens_per_s"] == 290.0 and rows[2]["tokens_per_s"] == 0.0
    assert slow_verdict(rows, errors=0)["ok"]
    assert not slow_verdict(rows, errors=1)["ok"]
    even = replica_rows(replicas, {"s": 33, "f1": 33, "f2": 34}, {}, speed, 10.0)
    assert not slow_verdict(even, errors=0)["ok"]  # a router blind to speed


def test_the_conversations_are_the_same_for_every_variant_and_share_their_system_prompts() -> None:
    args = SimpleNamespace(
        conversations=7, turns=3, system_prompts=3, system_chars=200, user_chars=50, prefix_max_tokens=8
    )
    systems, conversations = make_workload(args)
    again = make_workload(args)
    assert (systems, conversations) == again
    assert len(systems) == 3 and len(set(systems)) == 3 and all(len(s) == 200 for s in systems)
    assert [c.system for c in conversations] == [0, 1, 2, 0, 1, 2, 0]
    assert all(len(c.user_messages) == 3 for c in conversations)
    assert conversations[5].user_messages[0].startswith("session:conv-005 ")
    assert conversations[5].session == "conv-005"


def test_the_hit_rate_is_over_every_replicas_counters_between_two_reads() -> None:
    zero = dict.fromkeys(("requests", "prompt_chars", "hit_chars", "hit_requests"), 0.0)
    before = [zero, zero | {"requests": 2.0, "prompt_chars": 100.0}, zero]
    after = [
        {"requests": 10.0, "prompt_chars": 1000.0, "hit_chars": 800.0, "hit_requests": 9.0},
        {"requests": 12.0, "prompt_chars": 1100.0, "hit_chars": 700.0, "hit_requests": 8.0},
        zero,
    ]
    figures = hit_figures(before, after)
    assert figures["hit_rate"] == pytest.approx(1500.0 / 2000.0)
    assert figures["request_hit_rate"] == pytest.approx(17.0 / 20.0)
    assert figures["replica_requests"] == [10, 10, 0]


def test_a_session_is_split_when_several_replicas_served_its_turns() -> None:
    def turn(session: str, replica: str | None) -> SimpleNamespace:
        return SimpleNamespace(session=session, record=SimpleNamespace(replica=replica))

    turns = [turn("a", "r1"), turn("a", "r1"), turn("b", "r1"), turn("b", "r2"), turn("c", None)]
    assert split_sessions(turns) == (2, 1)  # type: ignore[arg-type]


def test_the_prefix_bar_compares_every_variant_with_the_first() -> None:
    rows = [{"variant": "base", "hit_rate": 0.8, "errors": 0}, {"variant": "change", "hit_rate": 0.73, "errors": 0}]
    v = prefix_verdict(rows)
    assert v["over_base"]["change"] == pytest.approx(0.9125) and v["ok"]
    assert not prefix_verdict([rows[0], rows[1] | {"hit_rate": 0.7}])["ok"]
    assert not prefix_verdict([rows[0], rows[1] | {"errors": 1}])["ok"]
    assert prefix_verdict(rows[:1])["ok"] is None  # no base to compare with


def test_phases_are_taken_in_order_once_and_unknown_ones_refused() -> None:
    assert parse_phases("prefix, chaos,prefix") == ["prefix", "chaos"]
    for wrong in ("", "chaos,fast"):
        with pytest.raises(ValueError, match="--phase"):
            parse_phases(wrong)
    assert slow_seconds(SimpleNamespace(slow_seconds=None, seconds=120.0)) == 40.0
    assert slow_seconds(SimpleNamespace(slow_seconds=None, seconds=20.0)) == 20.0
    assert slow_seconds(SimpleNamespace(slow_seconds=90.0, seconds=20.0)) == 90.0
