"""A request's place in the scheduler: its band, its flow and weight, its expected tokens.

The band is what the request asked for (the body's ``priority``, else the ``x-gateway-priority``
header, which the edge parsed into ``RequestContext.priority``), as the key's policy allows: a
key asking above its ``top_priority`` runs at its ``top_priority`` (lowered, not refused; the
response's ``x-gateway-priority`` header says the band that ran), and a key asking nothing runs
at its own ``priority``. The flow is the key's name; requests without a named key share one.
Where the model's Triton queue has priority levels, the band also goes to Triton with each
request (``triton_priority``), so requests waiting there are ordered by it too.
"""

from __future__ import annotations

from gateway.core.schedule import NO_KEY_FLOW, Claim
from gateway.keys.context import current_key
from gateway.priorities import STANDARD

CHARS_PER_TOKEN = 4
"""The prompt's size in tokens where it was not counted: its cost is an estimate anyway, and
settled with the backend's count when the request ends."""


def plan_claim(asked: int | None, header: int | None, prompt_tokens: int, max_tokens: int) -> Claim:
    """The claim of a request that asked for ``asked`` (the body) or ``header`` (None: neither)."""
    wanted = asked if asked is not None else header
    key = current_key.get()
    if key is None or not key.policy.name:  # no key, or a flat one: any band, one shared flow
        band = STANDARD if wanted is None else wanted
        return Claim(band, NO_KEY_FLOW, 1.0, prompt_tokens, max_tokens)
    policy, name = key.policy, key.policy.name
    return Claim(policy.band(wanted), name, policy.weight, prompt_tokens, max_tokens)


def triton_priority(band: int, levels: int) -> int:
    """The Triton priority level a request of ``band`` is sent with, to a model whose queue has
    ``levels`` levels (``ModelInterface.priority_levels``); 0: send none.

    Triton's levels run the other way from bands (1 is the most urgent, ``levels`` the least) and
    a request that names none waits at the model's default level. So a more urgent band than
    standard asks for level 1, a less urgent one for the last level, and a standard request sends
    nothing: the default is the operator's level for ordinary traffic. The gateway's bands are
    finer than that (any int), but the ordering that matters on Triton's side is these three. A
    model without levels ignores a priority: nothing is sent to it."""
    if levels <= 0 or band == STANDARD:
        return 0
    return 1 if band < STANDARD else levels


def estimate_tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN + 1
