"""TLS to Triton: the PEM files that configure both the streaming transport and the control
channel."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc


@dataclass(frozen=True)
class TritonTLS:
    """PEM files for TLS to Triton: ``None`` falls back to the system's roots / no client
    certificate. The same files configure the grpc.aio channel and the streaming connection."""

    root_certificates: Path | None = None
    certificate_chain: Path | None = None
    private_key: Path | None = None

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        def read(path: Path | None) -> bytes | None:
            return path.read_bytes() if path is not None else None

        return grpc.ssl_channel_credentials(
            read(self.root_certificates), read(self.private_key), read(self.certificate_chain)
        )

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.root_certificates)
        if self.certificate_chain is not None:
            context.load_cert_chain(self.certificate_chain, self.private_key)
        context.set_alpn_protocols(["h2"])
        return context
