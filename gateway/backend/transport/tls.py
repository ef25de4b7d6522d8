"""TLS to Triton: one set of PEM files, one trust store, for both the streaming transport and the
control channel.

Left to themselves the two would not trust the same servers: grpc verifies against the root bundle
compiled into it, ``ssl`` against the system's. So the roots are read here once, from
``root_certificates`` or else from the system's default bundle file (the one OpenSSL loads:
``SSL_CERT_FILE``, else the distribution's, else the certificates in its directory), and both get
the same certificates.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import grpc

_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----\s.+?-----END CERTIFICATE-----", re.S)


def system_roots() -> tuple[bytes, str]:
    """The system's trusted roots as PEM, and where they were read from."""
    paths = ssl.get_default_verify_paths()
    if paths.cafile:  # None unless the file exists
        return Path(paths.cafile).read_bytes(), paths.cafile
    if paths.capath and Path(paths.capath).is_dir():
        files = sorted({p.resolve() for p in Path(paths.capath).iterdir() if p.is_file()})
        data = b"\n".join(p.read_bytes() for p in files)
        if _CERTIFICATE.search(data):
            return data, paths.capath
    raise ValueError(
        f"no system CA bundle found ({paths.openssl_cafile}, {paths.openssl_capath}, $SSL_CERT_FILE): "
        "give Triton's CA file (triton_ssl_root_certs)"
    )


@dataclass(frozen=True)
class TritonTLS:
    """PEM files for TLS to Triton: ``None`` falls back to the system's roots / no client
    certificate. The same files configure the grpc.aio channel and the streaming connection."""

    root_certificates: Path | None = None
    certificate_chain: Path | None = None
    private_key: Path | None = None

    @cached_property
    def trusted_roots(self) -> bytes:
        """The certificates both channels trust, PEM (comments dropped: ``ssl`` takes ASCII only)."""
        if self.root_certificates is not None:
            data, source = self.root_certificates.read_bytes(), str(self.root_certificates)
        else:
            data, source = system_roots()
        certificates = _CERTIFICATE.findall(data)
        if not certificates:
            raise ValueError(f"no PEM certificate in {source}")
        return b"\n".join(certificates) + b"\n"

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        def read(path: Path | None) -> bytes | None:
            return path.read_bytes() if path is not None else None

        return grpc.ssl_channel_credentials(self.trusted_roots, read(self.private_key), read(self.certificate_chain))

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.trusted_roots.decode("ascii"))
        if self.certificate_chain is not None:
            context.load_cert_chain(self.certificate_chain, self.private_key)
        context.set_alpn_protocols(["h2"])
        return context
