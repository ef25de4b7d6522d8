"""The request's key, for the layers below the edge that ask about it: planning (which models
it may see) and the core (whose name goes on the metrics, and whom to charge for tokens).

Context variables, as the request id (``gateway.logs``): the edge sets them before it calls the
app, and asyncio copies them into every task the request spawns, its stream included.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from gateway.keys.limits import LimitStore
from gateway.keys.policy import KeyPolicy


@dataclass(frozen=True, slots=True)
class RequestKey:
    """The policy of the key a request presented, and where its tokens are charged (None: a key
    without limits)."""

    policy: KeyPolicy
    limits: LimitStore | None = None

    @property
    def meters_tokens(self) -> bool:
        return self.limits is not None and self.policy.tpm > 0

    def charge(self, tokens: int) -> None:
        if self.limits is not None and tokens > 0:
            self.limits.charge(self.policy, tokens)


current_key: contextvars.ContextVar[RequestKey | None] = contextvars.ContextVar("current_key", default=None)


def key_name() -> str | None:
    """The request's key name (None: no key, or a flat key)."""
    key = current_key.get()
    return None if key is None else key.policy.name


def model_allowed(model_id: str, base: str) -> bool:
    """Whether the request's key may use this model (requests without a key may use any)."""
    key = current_key.get()
    return key is None or key.policy.allows(model_id, base)
