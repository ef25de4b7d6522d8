"""How far a change moved a figure, and whether that is more than the machine's noise. Pure.

A shared VM's figures move ±20 % from one run to the next, so the medians of two sides taken at
different times say little. ``micro`` runs the two sides in alternating order (ABBA: A B, B A,
A B, ...), so each round holds one run of each side close in time; the ratio of the two within a
round cancels what the machine did during that round. The change is the median of those per-round
ratios, and its spread a bootstrap interval over rounds: rounds drawn with replacement, the median
of each draw, the 2.5th and 97.5th percentiles of those medians. An interval that holds 0 % means
the rounds do not agree on a direction: *within noise*.

The bootstrap uses ``random.Random`` with a fixed seed, so the same figures give the same interval.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

SEED = 20261202
RESAMPLES = 4000
CONFIDENCE = 0.95

SLOWER, FASTER, NOISE = "slower", "faster", "within noise"


@dataclass(frozen=True, slots=True)
class Change:
    """One figure of two sides over paired rounds: medians of each side, and the change as the
    median of per-round ratios (``change / base``) with its interval."""

    base: float
    change: float
    ratio: float
    low: float
    high: float
    rounds: int

    @property
    def percent(self) -> float:
        return (self.ratio - 1) * 100

    @property
    def interval(self) -> tuple[float, float]:
        """The interval in % of change."""
        return (self.low - 1) * 100, (self.high - 1) * 100

    @property
    def verdict(self) -> str:
        """``slower`` when the whole interval is above 0 %, ``faster`` below, else within noise.
        (The figures are costs: more is slower.)"""
        return verdict(self.low, self.high)


def verdict(low: float, high: float) -> str:
    """Of a ratio's interval: whether it lies wholly above 1, wholly below, or holds 1."""
    if low > 1:
        return SLOWER
    if high < 1:
        return FASTER
    return NOISE


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values``, linear between the two nearest ranks."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = fraction * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def bootstrap_interval(
    values: Sequence[float], resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = SEED
) -> tuple[float, float]:
    """The percentile bootstrap interval of the median of ``values``: why a bootstrap, because
    per-round ratios on a shared machine have outliers no normal approximation fits, and the
    median keeps one bad round from moving the figure."""
    if not values:
        raise ValueError("no values")
    draw = random.Random(seed)
    size = len(values)
    medians = [statistics.median(draw.choices(values, k=size)) for _ in range(resamples)]
    tail = (1 - confidence) / 2
    return percentile(medians, tail), percentile(medians, 1 - tail)


def paired(base: Sequence[float | None], change: Sequence[float | None]) -> list[tuple[float, float]]:
    """The rounds where both sides have the figure (a round where one lacks it pairs nothing)."""
    return [(b, c) for b, c in zip(base, change, strict=False) if b is not None and c is not None]


def compare(base: Sequence[float | None], change: Sequence[float | None], seed: int = SEED) -> Change | None:
    """The change from ``base`` to ``change``, round by round (index ``i`` of each is round
    ``i``). None without a round where both sides have a positive base figure."""
    pairs = [(b, c) for b, c in paired(base, change) if b > 0]
    if not pairs:
        return None
    ratios = [c / b for b, c in pairs]
    low, high = bootstrap_interval(ratios, seed=seed)
    return Change(
        base=statistics.median(b for b, _ in pairs),
        change=statistics.median(c for _, c in pairs),
        ratio=statistics.median(ratios),
        low=low,
        high=high,
        rounds=len(pairs),
    )


def added(feature: Sequence[float | None], reference: Sequence[float | None]) -> float | None:
    """What a feature adds over its reference, both measured in each process: the median of the
    per-process differences (the same process's figures share its conditions)."""
    differences = [f - r for f, r in paired(feature, reference)]
    return statistics.median(differences) if differences else None


def theil_sen(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """A robust straight line through the points: the median of the pairwise slopes, and the
    median of ``y - slope * x``. Why not least squares: one request slowed by the machine would
    tilt the line. None when no two points differ in x."""
    slopes = [
        (ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]
    ]
    if not slopes:
        return None
    slope = statistics.median(slopes)
    return slope, statistics.median(y - slope * x for x, y in zip(xs, ys, strict=True))


def cost_at(chunks: Sequence[float], costs: Sequence[float], at: float) -> float:
    """A stream's cost at ``at`` chunks, from streams of the same tokens that went out in varying
    numbers of chunks: tokens that arrive together leave as one chunk, and most of a stream's
    cost is per chunk (a wake-up, a frame), so a machine that falls behind makes fewer chunks and
    cheaper streams. The line (``theil_sen``) read at ``at``; the median cost when every stream
    had the same number of chunks."""
    if not costs or len(chunks) != len(costs):
        raise ValueError("one chunk count per cost, at least one")
    line = theil_sen(chunks, costs)
    if line is None:
        return statistics.median(costs)
    slope, intercept = line
    return intercept + slope * at


def rounds_to_see(ratios: Sequence[float], effect: float = 0.05, confidence: float = CONFIDENCE) -> int | None:
    """Roughly how many paired rounds make an interval narrower than ``effect`` on each side, from
    the spread of the ratios at hand: σ estimated robustly (1.4826 × the median absolute
    deviation, as the median ignores outliers too), the median's standard error about
    1.25 σ / √n, so n is about (z · 1.25 σ / effect)². A guide for choosing ``--repeat``, not a
    promise."""
    if len(ratios) < 3:
        return None
    middle = statistics.median(ratios)
    spread = 1.4826 * statistics.median(abs(r - middle) for r in ratios)
    z = statistics.NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    return max(2, math.ceil((z * 1.2533 * spread / effect) ** 2))


def instruction_change(base: float, change: float, tolerance: float) -> tuple[float, str]:
    """The change in % between two instruction counts, and its verdict: a count repeats within
    ``tolerance`` (a fraction) from run to run, so a smaller move is within noise."""
    ratio = change / base
    if abs(ratio - 1) <= tolerance:
        return (ratio - 1) * 100, NOISE
    return (ratio - 1) * 100, SLOWER if ratio > 1 else FASTER
