"""The ``StreamTransport`` on the gateway's own HTTP/2 client: dialing, retiring and replacing
the shared ``GrpcConnection`` (``h2conn.py``; why it exists is told there).

One connection carries every call. A connection the server drains (GOAWAY) or that refuses a
stream is retired: its calls run to their end on it while new calls go to a fresh one. Dials are
shared (one at a time, whatever the number of callers) and a failed one is remembered for a
backoff that doubles up to a cap and resets on success, so while Triton is down each request fails
fast with the same UNAVAILABLE instead of each one dialing. A request's deadline covers the dial
and the wait for a stream slot.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import TypeVar

from gateway.backend.transport.base import DEADLINE_EXCEEDED, UNAVAILABLE, CallError, Metadata
from gateway.backend.transport.h2call import StreamCall
from gateway.backend.transport.h2conn import DEFAULT_MAX_MESSAGE_BYTES, GrpcConnection, Keepalive

__all__ = ["CallError", "GrpcConnection", "H2Transport", "Keepalive", "StreamCall", "connect"]

T = TypeVar("T")


async def connect(
    target: str,
    *,
    ssl_context: ssl.SSLContext | None = None,
    keepalive: Keepalive | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    timeout: float = 5.0,
) -> GrpcConnection:
    """Open a connection to ``host:port``. Over TLS the server must select ALPN ``h2``: gRPC needs
    HTTP/2, and a server that picked anything else would answer the preface with garbage."""
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {target!r}")
    host = host.strip("[]")
    loop = asyncio.get_running_loop()
    transport, protocol = await asyncio.wait_for(
        loop.create_connection(
            lambda: GrpcConnection(target, "https" if ssl_context else "http", keepalive, max_message_bytes),
            host,
            int(port),
            ssl=ssl_context,
            server_hostname=host if ssl_context else None,
        ),
        timeout,
    )
    if ssl_context is not None:
        ssl_object = transport.get_extra_info("ssl_object")
        selected = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        if selected != "h2":
            transport.abort()
            raise CallError(
                UNAVAILABLE,
                f"the TLS server at {target} selected ALPN protocol {selected!r}, not 'h2': gRPC needs HTTP/2 "
                "(is this Triton's gRPC port, and does any proxy in between offer h2?)",
            )
    return protocol


class H2Transport:
    """The ``StreamTransport`` over one shared ``GrpcConnection``, (re)opened on demand, so a
    Triton restart costs the calls that were on the old connection and nothing after."""

    def __init__(
        self,
        target: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        keepalive: Keepalive | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        connect_timeout: float = 5.0,
        backoff: tuple[float, float] = (0.25, 2.0),
    ) -> None:
        """``backoff``: (first, cap) seconds for which a failed dial fails the calls after it;
        the same bounds as the grpc.aio control channel's reconnect backoff."""
        self.target = target
        self._ssl = ssl_context
        self._keepalive = keepalive
        self._max_message = max_message_bytes
        self._connect_timeout = connect_timeout
        self._connection: GrpcConnection | None = None
        self._retired: list[GrpcConnection] = []
        """Connections that still finish their calls; kept to be closed with the transport."""
        self._dial: asyncio.Task[GrpcConnection] | None = None
        self._failure: CallError | None = None
        self._retry_at = 0.0
        self._backoff_first, self._backoff_cap = backoff
        self._backoff = self._backoff_first

    async def open(
        self,
        path: bytes,
        message: bytes,
        parse: Callable[[bytes], T],
        deadline: float | None = None,
        metadata: Metadata = (),
    ) -> StreamCall[T]:
        attempts = 3  # a connection can go away between the dial and the call's headers
        while True:
            connection = self._connection
            if connection is None or not connection.usable:
                connection = await self._connected(deadline)
            try:
                return await connection.open(path, message, parse, deadline, metadata)
            except CallError as exc:
                attempts -= 1
                if not exc.retryable or not attempts:
                    raise

    async def _connected(self, deadline: float | None) -> GrpcConnection:
        failure = self._failure
        if failure is not None and time.monotonic() < self._retry_at:
            raise CallError(failure.code, failure.details)
        dial = self._dial
        if dial is None:
            dial = self._dial = asyncio.ensure_future(self._dial_once())
            dial.add_done_callback(_retrieve)
        if deadline is None:
            return await asyncio.shield(dial)
        try:  # the dial is shared: a caller whose deadline passes leaves it to the others
            return await asyncio.wait_for(asyncio.shield(dial), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise CallError(DEADLINE_EXCEEDED, f"the deadline passed while connecting to {self.target}") from None

    def reachable(self) -> None:
        """Forget a failed dial: the control channel has just had Triton's answer. Without this a
        readiness probe could say ready while requests still failed on the remembered dial for up
        to the backoff's cap (2 s), and an orchestrator would route to a replica that refuses."""
        self._failure, self._retry_at, self._backoff = None, 0.0, self._backoff_first

    async def _dial_once(self) -> GrpcConnection:
        try:
            connection = await connect(
                self.target,
                ssl_context=self._ssl,
                keepalive=self._keepalive,
                max_message_bytes=self._max_message,
                timeout=self._connect_timeout,
            )
        except CallError as exc:
            failure = exc
        except (TimeoutError, OSError) as exc:  # ssl.SSLError is an OSError
            failure = CallError(UNAVAILABLE, f"cannot connect to {self.target} ({exc or type(exc).__name__})")
        else:
            self._failure, self._backoff = None, self._backoff_first
            old, self._connection = self._connection, connection
            self._retired = [c for c in self._retired if not c.closed]
            if old is not None and not old.closed:
                self._retired.append(old)
            return connection
        finally:
            self._dial = None
        self._failure, self._retry_at = failure, time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, self._backoff_cap)
        raise failure

    async def close(self) -> None:
        if self._dial is not None:
            self._dial.cancel()
        for connection in [*self._retired, self._connection]:
            if connection is not None:
                connection.close()
        self._connection, self._retired = None, []


def _retrieve(dial: asyncio.Future[GrpcConnection]) -> None:
    """Consume a dial's failure: every caller may have left (deadlines), and asyncio would log it
    as never retrieved."""
    if not dial.cancelled():
        dial.exception()
