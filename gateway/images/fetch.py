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
- redirects are followed by hand, at most ``image_fetch_max_redirects``, each target checked
  again from the start;
- only a 200 is an image; the body is read up to the byte cap and no further;
- one timeout covers the whole fetch (the wait for a slot, every redirect, the body), and at most
  ``image_fetch_concurrency`` fetches run at once per process.

No proxy from the environment is used (``trust_env=False``): a proxy would connect by name and
undo the address check. Connections are not kept alive: the next fetch may name another host on
the same address, and a pooled TLS connection would carry the first one's name.
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


def address_allowed(address: str, allow_private: bool) -> bool:
    """Whether a connection may go to ``address``: a public unicast address, or any unicast one
    when private addresses are allowed (multicast and unspecified never)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_multicast or ip.is_unspecified:
        return False
    return allow_private or ip.is_global


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
        except httpx.HTTPError as exc:
            raise InvalidRequestError(f"the image could not be fetched: {exc}", param=param) from None

    async def _follow(self, url: str, param: str) -> bytes:
        target = _parse(url, param)
        for _ in range(self.rules.max_redirects + 1):
            pinned, headers, extensions = await self._pin(target, param)
            async with self._client.stream("GET", pinned, headers=headers, extensions=extensions) as response:
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    target = _parse(str(target.join(response.headers["location"])), param)
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
        except OSError as exc:
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
        return pinned, {"Host": name}, extensions

    async def _read(self, response: httpx.Response, param: str) -> bytes:
        cap = self.rules.max_bytes
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise InvalidRequestError(f"the image is {declared} bytes; at most {cap} are allowed", param=param)
        body = bytearray()
        async for piece in response.aiter_bytes():
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
    return parsed
