"""Where the Triton replicas are: ``triton_url``'s entries (parsed by ``config``) resolved to addresses.

``triton_url`` is a comma-separated list. ``host:port`` is one replica, dialled as given (its
name resolved by the connection, as before). ``dns:///host:port`` is as many replicas as the name
has addresses, re-resolved on an interval: a Kubernetes headless Service lists one address per
ready pod, so pods that come and go are followed without a restart. The ``dns:///`` spelling is
gRPC's own target syntax, which operators already know from gRPC clients.
"""

from __future__ import annotations

import asyncio
import socket

from gateway.config import EndpointSpec


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
