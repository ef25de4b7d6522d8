"""The chaos phase's pure parts: the strikes' schedule and victims, and what the streams and
the gateway's pages said about them (``bench/replicas_chaos.py`` runs them)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from bench.procstat import percentile
from bench.replicas_fleet import Histogram, StreamRecord, total

KINDS = ("kill", "drain")
EVERY = (10.0, 20.0)
"""Seconds between two strikes, drawn uniformly."""
MIGRATIONS = "gateway_stream_migrations_total"
MIGRATION_SECONDS = "gateway_stream_migration_seconds"
OUTCOMES = ("continued", "failed", "not_continuable")
REFUSED = "HTTP status"
"""A request the gateway answered with an error status: no stream began, so none was lost; a
client backs off and asks again."""


@dataclass(frozen=True)
class Strike:
    """One planned strike: ``at`` seconds into the window; ``draw`` (0..1) picks among the live."""

    at: float
    how: str
    draw: float


def chaos_schedule(seed: int, seconds: float, every: tuple[float, float] = EVERY) -> list[Strike]:
    """Strikes ``every`` apart until ``seconds``, kills and drains half each (shuffled): the same
    schedule for the same seed, so two runs strike alike whatever the machine's speed."""
    rng = random.Random(seed)
    times: list[float] = []
    at = rng.uniform(*every)
    while at < seconds:
        times.append(at)
        at += rng.uniform(*every)
    kinds = [KINDS[i % 2] for i in range(len(times))]
    rng.shuffle(kinds)
    return [Strike(round(t, 3), how, rng.random()) for t, how in zip(times, kinds, strict=True)]


def choose_victim(live: Sequence[int], up: Collection[int], draw: float) -> int | None:
    """The replica ``draw`` picks among those live and in the gateway's rotation (``up``: one
    started again may still sit out its ejection backoff, serving nothing), while another such
    one is left for their streams to move to; None when there is not."""
    serving = sorted(set(live) & set(up))
    if len(serving) < 2:
        return None
    return serving[min(int(draw * len(serving)), len(serving) - 1)]


@dataclass
class Struck:
    """A strike as it happened."""

    at: float
    how: str
    replica: str | None
    time: float = 0.0
    """``perf_counter`` when the signal went (the streams' clock)."""
    in_flight: int = 0
    gone_s: float | None = None
    back_s: float | None = None
    error: str | None = None


# --------------------------------------------------------------------------- what the client saw


def outcome(record: StreamRecord) -> str:
    if record.failure is not None:
        return record.failure
    if record.error is not None:
        return "error event"
    if not record.saw_done:
        return "no [DONE]"
    if record.finish_reason is None:
        return "no finish_reason"
    return "completed"


def struck_by(record: StreamRecord, struck: Sequence[Struck]) -> str | None:
    """``kill`` when its replica was killed while it ran (so a completed one was migrated), else
    ``drain`` when it was drained (it finished there within the exit timeout, or was migrated),
    else None."""
    end = record.done if record.done is not None else float("inf")
    hows = {
        s.how for s in struck if s.replica is not None and s.replica == record.replica and record.sent <= s.time <= end
    }
    return "kill" if "kill" in hows else "drain" if hows else None


def struck_while_running(record: StreamRecord, struck: Sequence[Struck]) -> bool:
    return struck_by(record, struck) is not None


def gap_figures(records: Sequence[StreamRecord]) -> dict[str, Any]:
    gaps = [r.max_gap * 1000.0 for r in records]
    return {
        "streams": len(records),
        "max_gap_p50_ms": percentile(gaps, 0.5),
        "max_gap_p95_ms": percentile(gaps, 0.95),
        "max_gap_max_ms": max(gaps) if gaps else None,
    }


def summarize_streams(records: Sequence[StreamRecord], struck: Sequence[Struck], max_tokens: int) -> dict[str, Any]:
    """Streams by outcome (refused before a stream apart from lost in one); the largest gap of
    each completed stream by what struck its replica under it (a kill, a drain, nothing); usage."""
    outcomes = Counter(outcome(r) for r in records)
    completed = [r for r in records if outcome(r) == "completed"]
    lost = [r for r in records if outcome(r) not in ("completed", REFUSED)]
    samples: dict[str, str] = {}
    for r in records:
        samples.setdefault(outcome(r), f"{outcome(r)}: {r.error or ''}"[:300])
    return {
        "started": len(records),
        "completed": len(completed),
        "lost": len(lost),
        "refused": outcomes[REFUSED],
        "lost_by_kind": {k: v for k, v in outcomes.items() if k not in ("completed", REFUSED)},
        "failure_samples": [text for kind, text in samples.items() if kind != "completed"],
        "struck_streams": sum(struck_while_running(r, struck) for r in records),
        "usage_wrong": sum(r.usage_tokens != max_tokens for r in completed),
        "gaps": {
            str(how): gap_figures([r for r in completed if struck_by(r, struck) == how]) for how in (*KINDS, None)
        },
    }


def stream_rows(records: Sequence[StreamRecord], start: float) -> list[list[Any]]:
    """Every stream, for the JSON: index, replica, sent and ended (s into the window), outcome,
    largest gap (ms), error."""
    return [
        [r.index, r.replica, round(r.sent - start, 3), None if r.done is None else round(r.done - start, 3),
         outcome(r), round(r.max_gap * 1000.0, 1), (r.error or "")[:120] or None]
        for r in records
    ]  # fmt: skip


def migration_figures(before: str, after: str) -> dict[str, Any]:
    """The gateway's migrations between two reads of its ``/metrics``."""
    counts = {o: total(after, MIGRATIONS, outcome=o) - total(before, MIGRATIONS, outcome=o) for o in OUTCOMES}
    seconds = Histogram.read(after, MIGRATION_SECONDS).since(Histogram.read(before, MIGRATION_SECONDS))
    mean, p95 = seconds.mean, seconds.quantile(0.95)
    return {
        "migrations": counts,
        "exported": MIGRATIONS in after,
        "added_mean_ms": None if mean is None else mean * 1000.0,
        "added_p95_ms": None if p95 is None else p95 * 1000.0,
        "timed": seconds.count,
    }


def pick_sample(records: Sequence[StreamRecord], struck: Sequence[Struck], size: int, seed: int) -> list[StreamRecord]:
    """Up to ``size`` completed streams to ask again: the struck ones first (what migration could
    have changed), then the others, each group in a seeded order."""
    rng = random.Random(seed)
    completed = [r for r in records if outcome(r) == "completed"]
    hit = [r for r in completed if struck_while_running(r, struck)]
    spared = [r for r in completed if not struck_while_running(r, struck)]
    rng.shuffle(hit)
    rng.shuffle(spared)
    return (hit + spared)[:size]


def first_difference(a: str, b: str) -> int:
    """Where two texts first differ (the shorter one's length when one starts the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
