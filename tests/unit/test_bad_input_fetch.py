"""Image fetching under bad input: whatever the URL, a redirect or the far end sends, the answer is
a 400 naming the image's part (never a 500); an IPv6 address that carries an IPv4 address is
checked as that IPv4 address; a compressed body is refused before anything is inflated.

The far end is a real server on 127.0.0.1 that answers one canned response per connection."""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import InvalidRequestError
from gateway.images.fetch import FetchRules, ImageFetcher, address_allowed, embedded_ipv4

PARAM = "messages.0.content.1"


async def refusal(fetcher: ImageFetcher, url: str) -> InvalidRequestError:
    """The ``InvalidRequestError`` fetching ``url`` raises (any other exception fails the test)."""
    try:
        await fetcher.fetch(url, PARAM)
    except InvalidRequestError as exc:
        assert exc.param == PARAM
        return exc
    finally:
        await fetcher.aclose()
    raise AssertionError(f"fetching {url} was not refused")


async def served(
    answer: bytes, fetch: Callable[[str], Awaitable[Any]], *, http: bool = True
) -> tuple[Any, list[bytes]]:
    """``fetch`` run against a server answering ``answer`` to every request (once its head is
    read; not ``http``: once anything is read); its result and what the server read."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            heads.append(await (reader.readuntil(b"\r\n\r\n") if http else reader.read(65536)))
            writer.write(answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await fetch(f"127.0.0.1:{port}"), heads
    finally:
        server.close()
        await server.wait_closed()


def local_fetcher() -> ImageFetcher:
    return ImageFetcher(FetchRules(hosts=("127.0.0.1",), allow_private=True, timeout=5.0, max_bytes=1_000_000))


def test_an_allowed_name_with_a_label_over_63_characters_is_a_400() -> None:
    fetcher = ImageFetcher(FetchRules(hosts=("*.example.com",)))
    error = asyncio.run(refusal(fetcher, f"http://{'a' * 64}.example.com/x.png"))
    assert "does not resolve" in error.message


@pytest.mark.parametrize("location", ["http://[::1", "http://127.0.0.1:port/x.png", "http://\x01/x.png"])
def test_a_malformed_redirect_location_is_a_400(location: str) -> None:
    answer = f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode("latin-1")
    error, _ = asyncio.run(served(answer, lambda at: refusal(local_fetcher(), f"http://{at}/x.png")))
    assert "invalid url" in error.message.lower()


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/x.png", "http://127.0.0.1:65536/x.png"])
def test_a_port_outside_tcps_range_is_a_400(url: str) -> None:
    error = asyncio.run(refusal(local_fetcher(), url))
    assert "not a TCP port" in error.message


def test_a_redirect_to_a_port_outside_tcps_range_is_a_400() -> None:
    answer = b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:70000/x.png\r\nContent-Length: 0\r\n\r\n"
    error, _ = asyncio.run(served(answer, lambda at: refusal(local_fetcher(), f"http://{at}/x.png")))
    assert "not a TCP port" in error.message


@pytest.mark.parametrize(
    "answer",
    [b"garbage, not HTTP\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", b""],
    ids=["not-http", "body-cut-short", "closed-at-once"],
)
def test_a_broken_response_is_a_400(answer: bytes) -> None:
    error, _ = asyncio.run(served(answer, lambda at: refusal(local_fetcher(), f"http://{at}/x.png")))
    assert "could not be fetched" in error.message


def test_tls_to_a_server_that_does_not_speak_it_is_a_400() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    error, _ = asyncio.run(served(answer, lambda at: refusal(local_fetcher(), f"https://{at}/x.png"), http=False))
    assert "could not be fetched" in error.message


def test_a_gzip_bomb_is_refused_unread_and_identity_was_asked_for() -> None:
    bomb = gzip.compress(b"\0" * 50_000_000)  # about 50 kB that inflate to 50 MB: 50x the cap
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Encoding: gzip\r\n"
        + f"Content-Length: {len(bomb)}\r\n\r\n".encode()
        + bomb
    )
    error, heads = asyncio.run(served(answer, lambda at: refusal(local_fetcher(), f"http://{at}/x.png")))
    assert "Content-Encoding 'gzip'" in error.message
    assert b"\r\naccept-encoding: identity\r\n" in heads[0].lower()


def test_an_unencoded_body_is_read_as_sent() -> None:
    body = b"\x89PNG not really, but bytes"
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\n" + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    )

    async def fetch(at: str) -> bytes:
        fetcher = local_fetcher()
        try:
            return await fetcher.fetch(f"http://{at}/x.png", PARAM)
        finally:
            await fetcher.aclose()

    data, _ = asyncio.run(served(answer, fetch))
    assert data == body


# --- addresses that carry an IPv4 address ----------------------------------------------------------

PRIVATE_V4 = ["127.0.0.1", "10.1.2.3", "172.16.0.9", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.7"]
PUBLIC_V4 = ["93.184.216.34", "8.8.8.8", "1.1.1.1"]


def _v4(text: str) -> int:
    return int(ipaddress.IPv4Address(text))


def nat64(v4: int) -> str:
    return str(ipaddress.IPv6Address((0x64FF9B << 96) | v4))


def compatible(v4: int) -> str:
    return str(ipaddress.IPv6Address(v4))


def mapped(v4: int) -> str:
    return str(ipaddress.IPv6Address((0xFFFF << 32) | v4))


def translated(v4: int) -> str:
    return str(ipaddress.IPv6Address((0xFFFF << 48) | v4))


def sixtofour(v4: int, rest: int = 0) -> str:
    return str(ipaddress.IPv6Address((0x2002 << 112) | (v4 << 80) | rest))


def teredo(server: int, client: int, rest: int = 0) -> str:
    return str(ipaddress.IPv6Address((0x20010000 << 96) | (server << 64) | (rest << 32) | (client ^ 0xFFFFFFFF)))


FORMS = {"nat64": nat64, "compatible": compatible, "mapped": mapped, "translated": translated}
"""The forms whose IPv6 address is globally routable when its IPv4 address is: the IPv4 address decides."""

public_v4 = st.integers(0, 2**32 - 1).filter(
    lambda n: ipaddress.IPv4Address(n).is_global and not ipaddress.IPv4Address(n).is_multicast
)
private_v4 = st.integers(0, 2**32 - 1).filter(
    lambda n: not ipaddress.IPv4Address(n).is_global and not ipaddress.IPv4Address(n).is_multicast and n > 1
)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("v4", PRIVATE_V4)
def test_each_form_carrying_a_private_ipv4_is_refused(form: str, v4: str) -> None:
    address = FORMS[form](_v4(v4))
    assert embedded_ipv4(ipaddress.IPv6Address(address)) == (ipaddress.IPv4Address(v4),)
    assert not address_allowed(address, allow_private=False)
    assert address_allowed(address, allow_private=True)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("v4", PUBLIC_V4)
def test_each_form_carrying_a_public_ipv4_passes(form: str, v4: str) -> None:
    assert address_allowed(FORMS[form](_v4(v4)), allow_private=False)


@given(form=st.sampled_from(sorted(FORMS)), v4=private_v4)
def test_any_private_ipv4_in_any_form_is_refused(form: str, v4: int) -> None:
    assert not address_allowed(FORMS[form](v4), allow_private=False)


@given(form=st.sampled_from(sorted(FORMS)), v4=public_v4)
def test_any_public_ipv4_in_any_form_passes(form: str, v4: int) -> None:
    assert address_allowed(FORMS[form](v4), allow_private=False)


@given(v4=st.integers(0, 2**32 - 1), rest=st.integers(0, 2**80 - 1))
def test_6to4_carries_its_ipv4_and_is_never_public(v4: int, rest: int) -> None:
    """``2002::/16`` is not globally reachable (IANA): refused unless private addresses are
    allowed, and then only where the IPv4 address it carries is unicast."""
    address = sixtofour(v4, rest)
    assert embedded_ipv4(ipaddress.IPv6Address(address)) == (ipaddress.IPv4Address(v4),)
    assert not address_allowed(address, allow_private=False)
    unicast = not (ipaddress.IPv4Address(v4).is_multicast or v4 == 0)
    assert address_allowed(address, allow_private=True) is unicast


@given(server=st.integers(0, 2**32 - 1), client=st.integers(0, 2**32 - 1), rest=st.integers(0, 2**32 - 1))
def test_teredo_carries_its_server_and_client_and_is_never_public(server: int, client: int, rest: int) -> None:
    address = teredo(server, client, rest)
    carried = embedded_ipv4(ipaddress.IPv6Address(address))
    assert carried == (ipaddress.IPv4Address(server), ipaddress.IPv4Address(client))
    assert not address_allowed(address, allow_private=False)


@given(v4=st.integers(0, 2**32 - 1), low=st.integers(0, 2**32 - 1))
def test_the_local_use_nat64_prefix_is_private_whatever_it_carries(v4: int, low: int) -> None:
    address = str(ipaddress.IPv6Address((0x0064FF9B0001 << 80) | (v4 << 32) | low))
    assert not address_allowed(address, allow_private=False)


@pytest.mark.parametrize(
    ("address", "public", "private"),
    [
        ("64:ff9b::224.0.0.1", False, False),  # multicast, however it is carried
        ("::ffff:0.0.0.0", False, False),
        ("2002:e000:0001::1", False, False),  # 6to4 of 224.0.0.1
        ("::", False, False),
        ("::1", False, True),
        ("2606:4700::1111", True, True),  # carries nothing
    ],
)
def test_carried_multicast_and_unspecified_are_never_allowed(address: str, public: bool, private: bool) -> None:
    assert address_allowed(address, allow_private=False) is public
    assert address_allowed(address, allow_private=True) is private
