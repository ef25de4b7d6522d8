"""Fetching an ``image_url`` that is an ``http(s)`` URL, only as the operator allows it.

A URL in a request makes the gateway a client of whatever the request names, inside the
operator's network: server-side request forgery is the risk. So fetching is off unless hosts are
allowed (``image_fetch_hosts``), and every step is checked:

- the host must be on the allow-list (exact, or ``*.example.com`` for its subdomains);
- its name is resolved here, each address checked (no private, loopback, link-local, multicast or
  unspecified address unless ``image_fetch_allow_private``), and the connection goes to the
  address that was checked: the URL is rewritten to it, with the ``Host`` header and TLS server
  name (SNI, and the certificate check) kept as the original name, so a second DNS answer (DNS
  rebinding) cannot send the request elsewhere;
- an IPv6 address that carries an IPv4 address (IPv4-mapped and -translated, IPv4-compatible,
  NAT64's ``64:ff9b::/96``, 6to4, Teredo) reaches that IPv4 address through a translator or
  relay, so the IPv4 address is checked too (``embedded_ipv4``); the local-use NAT64 prefix
  ``64:ff9b:1::/48``, whose IPv4 address may sit anywhere in it, is private;
- redirects are followed by hand, at most ``image_fetch_max_redirects``, each target checked
  again from the start;
- only a 200 is an image; the body is asked for and taken only without a content encoding
  (``Accept-Encoding: identity``): images are compressed already, and a gzip body would be
  inflated piece by piece before the byte cap saw it (a decompression bomb); the body is read up
  to the byte cap and no further;
- one timeout covers the whole fetch (the wait for a slot, every redirect, the body), and at most
  ``image_fetch_concurrency`` fetches run at once per process.

No proxy from the environment is used (``trust_env=False``): a proxy would connect by name and
undo the address check. Connections are not kept alive: the next fetch may name another host on
the same address, and a pooled TLS connection would carry the first one's name.

Whatever the URL, its redirects or the far end do wrong (a name that cannot be encoded, a
malformed ``Location``, a refused connection, a TLS failure, a broken response) is a 400 naming
the image's part, never a 500.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass

import httpx

from gateway.errors import InvalidRequestError

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_FETCH_ERRORS = (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError)
"""What a fetch can raise from what the URL, a redirect or the far end sent: httpx's transport,
protocol and URL errors, ``socket.gaierror`` and ``ssl.SSLError`` (``OSError``), ``UnicodeError``
from a name IDNA cannot encode (a label over 63 characters) and other ``ValueError`` of URL
handling. Each is a 400 naming the part."""
_IDENTITY = {"Accept-Encoding": "identity"}


@dataclass(frozen=True, slots=True)
class FetchRules:
    """What fetching may do (from the settings)."""

    hosts: tuple[str, ...] = ()
    """Allowed host names or addresses, lower case; ``*.example.com`` allows its subdomains.
    Empty: fetching is off."""
    max_bytes: int = 10 * 1024 * 1024
    timeout: float = 10.0
    max_redirects: int = 3
    allow_private: bool = False
    concurrency: int = 8


def host_allowed(host: str, hosts: tuple[str, ...]) -> bool:
    host = host.lower().rstrip(".")
    for allowed in hosts:
        if allowed.startswith("*.") and host.endswith(allowed[1:]) and host != allowed[2:]:
            return True
        if host == allowed:
            return True
    return False


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
"""NAT64's well-known prefix (RFC 6052): the IPv4 address is the last 32 bits."""
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
"""The local-use NAT64 prefix (RFC 8215): not globally reachable, and the operator chooses where
in it the IPv4 address sits, so it is treated as private whatever it carries."""
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
"""IPv4-translated addresses (SIIT, RFC 2765): the IPv4 address is the last 32 bits."""
_COMPATIBLE = ipaddress.IPv6Network("::/96")
"""IPv4-compatible addresses (``::a.b.c.d``, deprecated by RFC 4291): the last 32 bits, where the
address is neither ``::`` nor ``::1``."""


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries, which a translator or relay would reach:
    IPv4-mapped, IPv4-translated, IPv4-compatible, NAT64 (``64:ff9b::/96``), 6to4 (``2002::/16``),
    Teredo (``2001::/32``: its server and its client). () for any other address."""
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    if ip.teredo is not None:
        return ip.teredo
    last = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64 or ip in _TRANSLATED or (ip in _COMPATIBLE and int(ip) > 1):
        return (last,)
    return ()


def _unicast_allowed(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, allow_private: bool) -> bool:
    if ip.is_multicast or ip.is_unspecified:
        return False
    return allow_private or ip.is_global


def address_allowed(address: str, allow_private: bool) -> bool:
    """Whether a connection may go to ``address``: a public unicast address, or any unicast one
    when private addresses are allowed (multicast and unspecified never). An IPv6 address that
    carries IPv4 addresses is allowed only if each of them is too; an IPv4-mapped one is its IPv4
    address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv4Address):
        return _unicast_allowed(ip, allow_private)
    carried = embedded_ipv4(ip)
    if not all(_unicast_allowed(v4, allow_private) for v4 in carried):
        return False
    if ip.ipv4_mapped is not None:
        return True  # ::ffff:0:0/96 is only the form: the IPv4 address, checked above, is where it goes
    if ip in _NAT64_LOCAL and not allow_private:
        return False
    return _unicast_allowed(ip, allow_private)


class ImageFetcher:
    """One per process: the HTTP client and the concurrency cap of image fetches."""

    def __init__(self, rules: FetchRules) -> None:
        self.rules = rules
        self._slots = asyncio.Semaphore(rules.concurrency)
        self._client = httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,
            timeout=rules.timeout,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    @property
    def enabled(self) -> bool:
        return bool(self.rules.hosts)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def fetch(self, url: str, param: str) -> bytes:
        """The image's bytes, or an ``InvalidRequestError`` naming ``param`` and why."""
        if not self.enabled:
            raise InvalidRequestError(
                "image URLs are not fetched by this gateway (setting image_fetch_hosts); send the image as a data: URL",
                param=param,
            )
        try:
            async with asyncio.timeout(self.rules.timeout):
                async with self._slots:
                    return await self._follow(url, param)
        except TimeoutError:
            raise InvalidRequestError(
                f"fetching the image took longer than {self.rules.timeout:g} s", param=param
            ) from None
        except _FETCH_ERRORS as exc:
            raise InvalidRequestError(
                f"the image could not be fetched: {str(exc) or type(exc).__name__}", param=param
            ) from None

    async def _follow(self, url: str, param: str) -> bytes:
        target = _parse(url, param)
        for _ in range(self.rules.max_redirects + 1):
            pinned, headers, extensions = await self._pin(target, param)
            async with self._client.stream("GET", pinned, headers=headers, extensions=extensions) as response:
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    target = _redirect(target, response.headers["location"], param)
                    continue
                if response.status_code != 200:
                    raise InvalidRequestError(
                        f"fetching the image answered HTTP {response.status_code}, not 200", param=param
                    )
                return await self._read(response, param)
        raise InvalidRequestError(
            f"fetching the image was redirected more than {self.rules.max_redirects} times", param=param
        )

    async def _pin(self, target: httpx.URL, param: str) -> tuple[httpx.URL, dict[str, str], dict[str, str]]:
        """The URL rewritten to a checked address of its host, with what keeps the name."""
        host = target.host
        if not host_allowed(host, self.rules.hosts):
            raise InvalidRequestError(f"images are not fetched from {host!r} (setting image_fetch_hosts)", param=param)
        port = target.port or _DEFAULT_PORTS[target.scheme]
        try:
            found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a name IDNA cannot encode
            raise InvalidRequestError(f"the image's host {host!r} does not resolve: {exc}", param=param) from None
        addresses = [str(info[4][0]) for info in found]
        allowed = [a for a in addresses if address_allowed(a, self.rules.allow_private)]
        if not allowed:
            raise InvalidRequestError(
                f"the image's host {host!r} resolves to an address images are not fetched from "
                "(private, loopback or link-local; setting image_fetch_allow_private)",
                param=param,
            )
        pinned = target.copy_with(host=allowed[0].split("%", 1)[0])  # httpx brackets an IPv6 address
        name = host if target.port is None else f"{host}:{target.port}"
        extensions = {"sni_hostname": host} if target.scheme == "https" else {}
        return pinned, {"Host": name, **_IDENTITY}, extensions

    async def _read(self, response: httpx.Response, param: str) -> bytes:
        cap = self.rules.max_bytes
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise InvalidRequestError(
                f"the image was sent with Content-Encoding {encoding!r}; only an unencoded body is taken",
                param=param,
            )
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise InvalidRequestError(f"the image is {declared} bytes; at most {cap} are allowed", param=param)
        body = bytearray()
        async for piece in response.aiter_raw():  # the bytes as sent: nothing is decoded
            body += piece
            if len(body) > cap:
                raise InvalidRequestError(f"the image is more than {cap} bytes; at most {cap} are allowed", param=param)
        return bytes(body)


def _parse(url: str, param: str) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InvalidRequestError(f"the image URL is not valid: {exc}", param=param) from None
    if parsed.scheme not in _DEFAULT_PORTS or not parsed.host:
        raise InvalidRequestError("an image URL must be a data: URL or an http(s) URL with a host", param=param)
    if parsed.port is not None and not 0 < parsed.port < 65536:  # httpx takes any number
        raise InvalidRequestError(f"the image URL's port {parsed.port} is not a TCP port", param=param)
    return parsed


def _redirect(target: httpx.URL, location: str, param: str) -> httpx.URL:
    """A redirect's ``Location``, resolved against the URL that answered it, checked as a URL."""
    try:
        joined = target.join(location)
    except httpx.InvalidURL as exc:
        raise InvalidRequestError(f"fetching the image was redirected to an invalid URL: {exc}", param=param) from None
    return _parse(str(joined), param)
