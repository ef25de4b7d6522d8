"""What every limit store shares: the decision, the windows, the headers, and a store in trouble.

Pure but for ``StoreTrouble``'s log line: the stores (``limits.MemoryLimits``,
``file_limits.FileLimits``, ``redis_limits.RedisLimits``) count, this module decides.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.errors import GatewayError
from gateway.keys.policy import KeyPolicy

logger = logging.getLogger("gateway.keys")

WINDOW = 60
"""Seconds of one window, for ``rpm`` and ``tpm`` alike."""

Refusal = Literal["concurrency", "requests", "tokens"]
Failure = Literal["open", "closed"]
Step = Literal["admit", "charge", "release", "renew"]


@dataclass(frozen=True, slots=True)
class Admit:
    """What admission found: whether the request may go on, and the key's counts for headers."""

    refused: Refusal | None
    requests: int
    """Requests counted in this window, this one included when admitted."""
    tokens: int
    """Tokens charged in this window."""
    reset: float
    """Seconds until the window turns."""
    counted: bool = True
    """False when nothing was counted (the store was unavailable and the gateway fails open)."""
    lease: str | None = None
    """The concurrency slot this request holds (``release`` gives it back); None: it holds none
    (refused, uncounted, a counting request, or a key without ``max_concurrent``)."""


UNCOUNTED = Admit(None, 0, 0, 0.0, counted=False)


def decide(
    policy: KeyPolicy, concurrent: int, requests: int, tokens: int, *, generating: bool = True
) -> Refusal | None:
    """Which limit refuses a request, given the key's counts before it, or None. A request that
    generates nothing (``generating=False``: counting a prompt's tokens) answers to ``rpm`` only."""
    if generating and policy.max_concurrent and concurrent >= policy.max_concurrent:
        return "concurrency"
    if policy.rpm and requests >= policy.rpm:
        return "requests"
    if generating and policy.tpm and tokens >= policy.tpm:
        return "tokens"
    return None


def window_of(now: float) -> tuple[int, float]:
    """The window ``now`` falls in, and the seconds left of it."""
    window = int(now // WINDOW)
    return window, (window + 1) * WINDOW - now


def _duration(seconds: float) -> str:
    """OpenAI's reset format: ``1s``, ``6m0s``, ``20ms``."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"


def rate_headers(policy: KeyPolicy, admit: Admit) -> list[tuple[bytes, bytes]]:
    """OpenAI's ``x-ratelimit-*`` headers for the limits the key has (none uncounted)."""
    if not admit.counted:
        return []
    headers: list[tuple[str, str]] = []
    reset = _duration(admit.reset)
    if policy.rpm:
        headers += [
            ("x-ratelimit-limit-requests", str(policy.rpm)),
            ("x-ratelimit-remaining-requests", str(max(0, policy.rpm - admit.requests))),
            ("x-ratelimit-reset-requests", reset),
        ]
    if policy.tpm:
        headers += [
            ("x-ratelimit-limit-tokens", str(policy.tpm)),
            ("x-ratelimit-remaining-tokens", str(max(0, policy.tpm - admit.tokens))),
            ("x-ratelimit-reset-tokens", reset),
        ]
    return [(k.encode(), v.encode()) for k, v in headers]


def retry_after(admit: Admit) -> int:
    """Whole seconds a refused client should wait: the window's end, or 1 for concurrency."""
    return 1 if admit.refused == "concurrency" else max(1, math.ceil(admit.reset))


class LimitUnavailable(GatewayError):
    """The shared counters cannot be reached (Redis down, the workers' file busy or broken) and
    the gateway fails closed: 503, so a client retries."""

    status_code = 503
    error_type = "service_unavailable"
    default_code = "rate_limiter_unavailable"


class LimitStore(Protocol):
    """Counters of every limited key, by name, and the leases of the requests in flight."""

    async def admit(self, policy: KeyPolicy, *, generating: bool = True) -> Admit:
        """Count a request, or refuse it. ``generating=False``: a counting request, which takes
        no slot and answers to ``rpm`` only. Raises ``LimitUnavailable`` (failing closed)."""

    async def release(self, policy: KeyPolicy, admit: Admit) -> None:
        """Give back ``admit``'s slot (nothing when it holds none). Never raises."""

    def charge(self, policy: KeyPolicy, tokens: int) -> None:
        """Add a request's tokens. Never waits and never raises: it runs on a stream's steps."""

    async def close(self) -> None: ...


class StoreTrouble:
    """How a store reports that it cannot count: a warning at most every 10 s (a store that is
    down would otherwise log every request), ``on_failure(step)`` each time (the metrics), and
    at admission ``LimitUnavailable`` when failing closed, else an uncounted admission."""

    def __init__(self, what: str, fail: Failure, on_failure: Callable[[Step], None] | None) -> None:
        self.what = what
        self.fail = fail
        self._on_failure = on_failure
        self._warned = 0.0

    def report(self, step: Step, message: str, *args: object) -> None:
        """Any step's failure: counted, and logged unless one was logged in the last 10 s."""
        if self._on_failure is not None:
            self._on_failure(step)
        now = time.monotonic()
        if now - self._warned > 10:
            self._warned = now
            logger.warning(message, *args)

    def admit_failed(self, exc: BaseException) -> Admit:
        """An admission that could not count: raises when failing closed."""
        self.report("admit", "key limits: %s unreachable (%s); failing %s", self.what, exc, self.fail)
        if self.fail == "closed":
            raise LimitUnavailable(
                "The rate limiter is unavailable; retry later.", headers={"Retry-After": "1"}
            ) from exc
        return UNCOUNTED
