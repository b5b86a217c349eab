"""Where a webhook may go: an http(s) URL whose host resolves to public addresses only, unless an
operator allowed an endpoint otherwise.

The check is made on the addresses the POST connects to, not on a name: `GuardedResolver` resolves,
refuses a name with any address that is not public, and hands aiohttp only the addresses it checked,
so a name that resolves to a public address for the check and to 127.0.0.1 for the connection (DNS
rebinding) never reaches the second. An address literal in the URL is checked the same way before the
request (aiohttp does not resolve one).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from yarl import URL

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeAddress(OSError):
    """The endpoint's host is, or resolves to, an address a webhook may not reach."""


class BadUrl(ValueError):
    """A URL that is no webhook endpoint."""


def refused(address: IpAddress) -> str | None:
    """Why a webhook may not connect to `address` (loopback, private, link-local, metadata, ...), or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (where cloud metadata services listen)"
    if address.is_multicast or address.is_unspecified or address.is_reserved:
        return "not a unicast address"
    if not address.is_global:
        return "a private or shared address"
    return None


def check_url(url: str) -> str:
    """The URL as stored, or `BadUrl` saying what is wrong with it."""
    if any(ord(c) < 33 or ord(c) > 126 for c in url):
        # Only ASCII: yarl (what aiohttp connects with) reads 127。0。0。1 or full-width digits as an
        # address that the name check would not see (an internationalised name is written in punycode).
        raise BadUrl("a URL is plain ASCII, without spaces or control characters (a name in punycode)")
    if len(url) > 2048:
        raise BadUrl("a URL is at most 2048 characters")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise BadUrl("an endpoint is an http:// or https:// URL")
    if parts.username is not None or parts.password is not None:
        raise BadUrl("an endpoint URL carries no credentials: the signature authenticates each POST")
    if not parts.hostname:
        raise BadUrl("an endpoint URL names a host")
    if parts.fragment:
        raise BadUrl("an endpoint URL has no #fragment")
    try:
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError as exc:
        raise BadUrl(f"bad port: {exc}") from None
    return url


def literal(host: str) -> IpAddress | None:
    """The address `host` names literally (with or without IPv6 brackets), or None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def check_literal(url: str, *, allow_private: bool) -> None:
    """Refuse a URL whose host is an address a webhook may not reach (names are checked as resolved).

    The host is read as aiohttp will connect to it (yarl's), not as the standard library reads it."""
    host = URL(url).raw_host or ""
    address = literal(host)
    if address is not None and not allow_private and (why := refused(address)):
        raise UnsafeAddress(f"{host} is {why}; --allow-private allows it, for a receiver you run")


class GuardedResolver(AbstractResolver):
    """Resolves with the system's resolver and returns only addresses that may be reached."""

    def __init__(self) -> None:
        self._inner = ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Every address of `host`, or `UnsafeAddress` when any one of them may not be reached."""
        found = await self._inner.resolve(host, port, family)
        for result in found:
            why = refused(ipaddress.ip_address(result["host"]))
            if why:
                raise UnsafeAddress(f"{host} resolves to {result['host']}, {why}")
        return found

    async def close(self) -> None:
        """Nothing of its own to close."""
        await self._inner.close()


def resolver_for(allow_private: bool) -> Any:
    """The resolver of an endpoint's POSTs: guarded, or the plain one an operator allowed."""
    return ThreadedResolver() if allow_private else GuardedResolver()


def client_session(allow_private: bool) -> aiohttp.ClientSession:
    """The HTTP client of webhook POSTs: the resolver above, no proxy from the environment, no cookie
    kept (one receiver's cookie never reaches another endpoint), and no pool limit of its own: the
    dispatcher caps POSTs per endpoint, and a shared limit would let hung receivers hold the others'
    connections (a POST's timeout counts the wait for one)."""
    connector = aiohttp.TCPConnector(resolver=resolver_for(allow_private), limit=0)
    return aiohttp.ClientSession(connector=connector, trust_env=False, cookie_jar=aiohttp.DummyCookieJar())
