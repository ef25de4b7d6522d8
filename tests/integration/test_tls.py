"""TLS to Triton: a real tritonserver with a gRPC TLS listener, certificates made by openssl."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import TEST_REPOSITORY, GatewayProcess, start_gateway, stop_gateway, stop_in_background


def make_client_certificate(directory: Path, ca_cert: Path, ca_key: Path) -> tuple[Path, Path]:
    """A client certificate signed by the same CA, for mutual TLS."""
    key, csr, cert = directory / "client.key", directory / "client.csr", directory / "client.pem"
    for args in (
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=gateway"],
        [
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(ca_cert),
            "-CAkey",
            str(ca_key),
            "-CAcreateserial",
            "-out",
            str(cert),
            "-days",
            "1",
        ],
    ):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    return cert, key


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for localhost / 127.0.0.1."""
    ca_key, ca_cert = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    ext = directory / "san.ext"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_cert),
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
    )
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=localhost")
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_cert),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(cert),
        "-days",
        "1",
        "-extfile",
        str(ext),
    )
    return ca_cert, cert, key


@pytest.fixture(scope="module")
def tls_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonServer, Path]]:
    directory = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_certificates(directory)
    server = TritonServer(
        TEST_REPOSITORY,
        log_file=directory / "triton.log",
        extra_args=(
            "--grpc-use-ssl=true",
            f"--grpc-server-cert={cert}",
            f"--grpc-server-key={key}",
            f"--grpc-root-cert={ca}",
        ),
    )
    server.start()
    yield server, ca
    stop_in_background(server)


def _gateway(triton: TritonServer, log: Path, *flags: str, ready: bool) -> GatewayProcess:
    return start_gateway(triton.grpc_url, log, "--model-repository", str(TEST_REPOSITORY), *flags, wait_ready=ready)


def test_gateway_speaks_tls_to_triton(tls_triton: tuple[TritonServer, Path], tmp_path: Path) -> None:
    triton, ca = tls_triton
    gateway = _gateway(triton, tmp_path / "gw.log", "--triton-ssl", "--triton-ssl-root-certs", str(ca), ready=True)
    try:
        prompt = json.dumps({"responses": [{"utf8": ["over tls"]}]})
        reply = httpx.post(gateway.url + "/v1/completions", json={"model": "scripted", "prompt": prompt}, timeout=30)
        assert reply.status_code == 200 and reply.json()["choices"][0]["text"] == "over tls"
    finally:
        stop_gateway(gateway)


def test_plaintext_gateway_cannot_reach_a_tls_triton(tls_triton: tuple[TritonServer, Path], tmp_path: Path) -> None:
    triton, _ = tls_triton
    gateway = _gateway(triton, tmp_path / "gw.log", ready=False)
    try:
        assert httpx.get(gateway.url + "/health/ready", timeout=10).status_code == 503
    finally:
        stop_gateway(gateway)


@pytest.fixture(scope="module")
def mtls_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonServer, Path, Path, Path]]:
    """A Triton that also demands a client certificate signed by its CA."""
    directory = tmp_path_factory.mktemp("mtls")
    ca, cert, key = make_certificates(directory)
    client_cert, client_key = make_client_certificate(directory, ca, directory / "ca.key")
    server = TritonServer(
        TEST_REPOSITORY,
        log_file=directory / "triton.log",
        extra_args=(
            "--grpc-use-ssl-mutual=true",
            f"--grpc-server-cert={cert}",
            f"--grpc-server-key={key}",
            f"--grpc-root-cert={ca}",
        ),
    )
    server.start()
    yield server, ca, client_cert, client_key
    stop_in_background(server)


def test_mutual_tls_streams_with_a_client_certificate(
    mtls_triton: tuple[TritonServer, Path, Path, Path], tmp_path: Path
) -> None:
    triton, ca, client_cert, client_key = mtls_triton
    gateway = _gateway(
        triton,
        tmp_path / "gw.log",
        "--triton-ssl",
        "--triton-ssl-root-certs",
        str(ca),
        "--triton-ssl-client-cert",
        str(client_cert),
        "--triton-ssl-client-key",
        str(client_key),
        ready=True,
    )
    try:
        prompt = json.dumps({"responses": [{"utf8": ["mutual "]}, {"utf8": ["tls"]}]})
        with httpx.stream(
            "POST",
            gateway.url + "/v1/completions",
            timeout=30,
            json={"model": "scripted", "prompt": prompt, "stream": True},
        ) as reply:
            assert reply.status_code == 200
            events = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == "mutual tls"
    finally:
        stop_gateway(gateway)


def test_mutual_tls_without_a_client_certificate_is_refused(
    mtls_triton: tuple[TritonServer, Path, Path, Path], tmp_path: Path
) -> None:
    triton, ca, _, _ = mtls_triton
    gateway = _gateway(triton, tmp_path / "gw.log", "--triton-ssl", "--triton-ssl-root-certs", str(ca), ready=False)
    try:
        assert httpx.get(gateway.url + "/health/ready", timeout=10).status_code == 503
        reply = httpx.post(
            gateway.url + "/v1/completions",
            timeout=30,
            json={"model": "scripted", "prompt": json.dumps({"responses": [{"utf8": ["x"]}]})},
        )
        assert reply.status_code == 503 and reply.json()["error"]["code"] == "backend_unavailable"
    finally:
        stop_gateway(gateway)
