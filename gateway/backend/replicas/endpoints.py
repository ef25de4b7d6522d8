"""Where the Triton replicas are: ``triton_url`` parsed, and DNS names resolved to addresses.

``triton_url`` is a comma-separated list. ``host:port`` is one replica, dialled as given (its
name resolved by the connection, as before). ``dns:///host:port`` is as many replicas as the name
has addresses, re-resolved on an interval: a Kubernetes headless Service lists one address per
ready pod, so pods that come and go are followed without a restart. The ``dns:///`` spelling is
gRPC's own target syntax, which operators already know from gRPC clients.
"""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import dataclass

DNS_SCHEME = "dns:///"
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """One entry of ``triton_url``."""

    host: str
    port: int
    resolve: bool
    """A ``dns:///`` entry: every address of ``host`` is a replica, followed over time."""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoints(value: str) -> tuple[EndpointSpec, ...]:
    """Raises ``ValueError`` naming the bad entry (settings turn it into a start-up error)."""
    specs: list[EndpointSpec] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        resolve = entry.startswith(DNS_SCHEME)
        target = entry[len(DNS_SCHEME) :] if resolve else entry
        match = _HOST_PORT.match(target)
        if match is None or not 0 < int(match[2]) < 65536:
            raise ValueError(
                f"each triton_url entry must be host:port or dns:///host:port (IPv6 as [addr]:port), got {entry!r}"
            )
        spec = EndpointSpec(match[1], int(match[2]), resolve)
        if spec not in specs:
            specs.append(spec)
    if not specs:
        raise ValueError("triton_url names no endpoint")
    return tuple(specs)


def _bracketed(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


async def resolve(spec: EndpointSpec) -> list[str] | None:
    """The replica addresses an entry stands for now, sorted (so every gateway process lists them
    alike). A fixed entry is itself. None when the lookup fails: a DNS blip and a Service with no
    ready pod look alike here (both are errors from the resolver), and the caller keeps what it
    had rather than dropping every replica over a blip."""
    if not spec.resolve:
        return [spec.address]
    host = spec.host.strip("[]")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, spec.port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return None
    return sorted({f"{_bracketed(str(info[4][0]))}:{spec.port}" for info in infos})
