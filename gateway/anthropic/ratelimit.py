"""Anthropic's rate-limit headers, which a limited key's answers on ``/v1/messages`` carry instead
of OpenAI's ``x-ratelimit-*`` (``keys.limits.rate_headers``): the names Anthropic's API sends and
its SDKs read, with the reset as an RFC 3339 time (OpenAI's is a duration). A refusal's
``retry-after`` is the error's own header (``http.security``), on both APIs alike.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

from gateway.keys.limits import Admit
from gateway.keys.policy import KeyPolicy


def reset_time(at: float) -> str:
    """The RFC 3339 UTC time ``at`` (seconds since the epoch), rounded up to a whole second so a
    client that waits until then finds the window turned: ``2026-12-02T09:31:00Z``."""
    return datetime.fromtimestamp(math.ceil(at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rate_headers(policy: KeyPolicy, admit: Admit, now: float | None = None) -> list[tuple[bytes, bytes]]:
    """``anthropic-ratelimit-requests-*`` and ``-tokens-*`` (limit, remaining, reset) for the
    limits the key has; none when nothing was counted. ``now``: the wall clock the window's reset
    is counted from (the stores' windows are ``time.time()``'s)."""
    if not admit.counted:
        return []
    reset = reset_time((time.time() if now is None else now) + admit.reset)
    headers: list[tuple[str, str]] = []
    if policy.rpm:
        headers += [
            ("anthropic-ratelimit-requests-limit", str(policy.rpm)),
            ("anthropic-ratelimit-requests-remaining", str(max(0, policy.rpm - admit.requests))),
            ("anthropic-ratelimit-requests-reset", reset),
        ]
    if policy.tpm:
        headers += [
            ("anthropic-ratelimit-tokens-limit", str(policy.tpm)),
            ("anthropic-ratelimit-tokens-remaining", str(max(0, policy.tpm - admit.tokens))),
            ("anthropic-ratelimit-tokens-reset", reset),
        ]
    return [(name.encode(), value.encode()) for name, value in headers]
