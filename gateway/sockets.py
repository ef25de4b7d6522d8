"""A listening socket that several processes bind to the same port (``SO_REUSEPORT``): the
``--workers`` processes' API port, and every gateway process's ``metrics_port``. Imports no
layer, so both the supervisor and the HTTP edge use it."""

from __future__ import annotations

import socket


def bind_shared(host: str, port: int, backlog: int) -> socket.socket:
    """A socket listening on ``host:port`` that other sockets may bind too."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock
