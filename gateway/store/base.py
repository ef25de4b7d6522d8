"""What a responses store is: the stored record, the protocol both backends follow, their bounds.

The Responses API keeps each response (``store: true``) so that ``previous_response_id`` can
continue a conversation and ``GET``/``DELETE /v1/responses/{id}`` can find it. A store holds one
row per response, keyed by id and scoped to an owner (a hash of the API key that created it): every
query carries the owner, so another key's response is simply not found, never "forbidden", and the
route answers it with the same 404 as an unknown id.

Two bounds keep it from growing without end, both cheap: a TTL (rows past it are invisible to
every read at once, and deleted in batches) and a maximum number of responses (the oldest are
deleted in the same batches). A batch runs at start and every ``prune_every`` puts, so the table
may hold up to ``prune_every - 1`` responses more than the maximum between two batches (under 2 %
of it); with several replicas on one database each counts its own puts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from gateway.errors import GatewayError

PRUNE_SLACK = 64
"""The table may exceed ``max_responses`` by at most ``max_responses // PRUNE_SLACK`` rows (one
batch's worth of puts): deleting the overflow costs an index scan of ``max_responses`` entries, so
it runs once per that many puts rather than on every one."""


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response, as the Responses route hands it over and gets it back."""

    id: str
    """``resp_...``."""
    owner: str
    """SHA-256 hex of the API key that created it (``""`` when the gateway has no keys)."""
    created_at: float
    """Unix seconds; the TTL and the eviction order count from it."""
    response: dict[str, Any]
    """The full Response object as returned to the client."""
    input_items: list[dict[str, Any]]
    """This response's own input items (normalized, each with an id), not its predecessors'."""
    previous_response_id: str | None


class ResponseStore(Protocol):
    """A durable, bounded, owner-scoped map from response id to :class:`StoredResponse`."""

    async def start(self) -> None:
        """Connect and create or migrate the schema (idempotent; safe with several replicas
        starting together). Raises :class:`ResponseStoreError` when the store cannot be used."""
        ...

    async def close(self) -> None:
        """Release connections; the data stays."""
        ...

    async def put(self, stored: StoredResponse) -> None:
        """Insert, or replace the response with the same id and owner."""
        ...

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        """The response, or None if it is absent, expired, or another owner's."""
        ...

    async def delete(self, response_id: str, owner: str) -> bool:
        """Delete it; False if it was absent, expired, or another owner's."""
        ...

    # Another component's tables on the same connections (``gateway.jobs``): its statements are
    # written for ``dialect`` with ``mark`` as the parameter mark; errors are ResponseStoreError.
    dialect: str
    mark: str

    async def execute(self, sql: str, params: tuple[object, ...] = ()) -> int:
        """Run one statement: the rows it changed."""
        ...

    async def fetch_all(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Every row one statement returns."""
        ...

    async def migrate(self, component: str, migrations: tuple[tuple[str, ...], ...]) -> None:
        """Bring ``component``'s tables to ``len(migrations)``, once among replicas."""
        ...


class ResponseStoreError(GatewayError):
    """The store cannot be reached or used: 503, so a client retries (or another replica).
    Raised at start too, where it stops the gateway with the reason (a file that cannot be
    created, a database that refuses the connection, a schema from a newer gateway)."""

    status_code = 503
    error_type = "service_unavailable"
    default_code = "store_unavailable"


@dataclass(frozen=True, slots=True)
class StoreBounds:
    """The TTL and size bound, and when a backend runs its batch that enforces them."""

    ttl: float
    """Seconds a response lives after ``created_at``."""
    max_responses: int
    """Most responses kept, all owners together; the oldest go first."""

    @property
    def prune_every(self) -> int:
        """Puts between two deletion batches."""
        return max(1, self.max_responses // PRUNE_SLACK)

    def oldest_alive(self, now: float) -> float:
        """The earliest ``created_at`` still visible at ``now``."""
        return now - self.ttl
