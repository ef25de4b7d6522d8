"""The request's key, for the layers below the edge that ask about it: planning and the probes
(which models it may see) and the core (whose name goes on the metrics, and whom to charge for
tokens).

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

keys_required: contextvars.ContextVar[bool] = contextvars.ContextVar("keys_required", default=False)
"""Whether the gateway has API keys (set by the edge on every request when it has): a request
that presents none (a probe, the only kind let through without one) may then see no model."""


def model_allowed(model_id: str, base: str) -> bool:
    """Whether the request's key may use this model. Without a key: any, unless the gateway has
    keys, and then none."""
    key = current_key.get()
    if key is None:
        return not keys_required.get()
    return key.policy.allows(model_id, base)


def models_visible() -> bool:
    """Whether the request may be told which models are served at all (the probes' detail):
    always on a gateway without keys, else only with a key."""
    return current_key.get() is not None or not keys_required.get()
