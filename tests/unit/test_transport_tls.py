"""TLS for the streaming connection against a real TLS peer on loopback: ALPN must select h2, and
the roots both channels trust are the same certificates (the given file, else the system's)."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from gateway.backend.transport import base as grpc_status
from gateway.backend.transport.h2 import CallError, H2Transport
from gateway.backend.transport.tls import TritonTLS, system_roots
from tests.unit.h2_peer import PATH, Server, collect, echo_three

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own root)."""
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    return cert, key


def _server_context(certificate: tuple[Path, Path], alpn: list[str] | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    if alpn is not None:
        context.set_alpn_protocols(alpn)
    return context


async def test_calls_flow_over_tls_when_the_server_selects_h2(certificate: tuple[Path, Path]) -> None:
    server = Server(echo_three)
    target = await server.start(ssl_context=_server_context(certificate, ["h2"]))
    transport = H2Transport(target, ssl_context=TritonTLS(root_certificates=certificate[0]).ssl_context())
    try:
        assert await collect(await transport.open(PATH, b"tls", bytes)) == [b"tls-0", b"tls-1", b"tls-2"]
    finally:
        await transport.close()
        server.close()


@pytest.mark.parametrize("offered", [["http/1.1"], None])
async def test_a_server_that_does_not_select_h2_is_a_clear_unavailable(
    certificate: tuple[Path, Path], offered: list[str] | None
) -> None:
    """An HTTP/1.1-only server (or one without ALPN) selects nothing when offered only h2."""
    server = Server(echo_three)
    target = await server.start(ssl_context=_server_context(certificate, offered))
    transport = H2Transport(target, ssl_context=TritonTLS(root_certificates=certificate[0]).ssl_context())
    try:
        with pytest.raises(CallError) as caught:
            await transport.open(PATH, b"x", bytes)
        assert caught.value.code == grpc_status.UNAVAILABLE
        assert "ALPN protocol None, not 'h2'" in caught.value.details
    finally:
        await transport.close()
        server.close()


def _count(pem: bytes) -> int:
    return pem.count(b"-----BEGIN CERTIFICATE-----")


def test_without_a_root_file_both_channels_trust_the_systems_bundle() -> None:
    bundle, _ = system_roots()
    tls = TritonTLS()
    assert _count(tls.trusted_roots) == _count(bundle) > 0
    blocks = tls.trusted_roots.split(b"-----END CERTIFICATE-----")[:-1]
    assert all(block.strip() + b"\n-----END CERTIFICATE-----" in bundle for block in blocks)
    loaded = tls.ssl_context().cert_store_stats()["x509_ca"]
    assert 0 < loaded <= _count(bundle)  # the store drops duplicates
    tls.grpc_credentials()  # grpc takes the same bytes


def test_a_root_file_is_what_both_channels_trust(certificate: tuple[Path, Path]) -> None:
    tls = TritonTLS(root_certificates=certificate[0])
    assert tls.trusted_roots.strip() == certificate[0].read_bytes().strip()
    assert tls.ssl_context().cert_store_stats()["x509_ca"] == 1
