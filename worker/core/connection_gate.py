"""A cap on concurrent connections per client network, in front of any asyncio protocol (SMTP or HTTP).

One address holding thousands of idle connections starves everyone else of file descriptors and
memory; the gate answers a connection over its client's cap with a short refusal (`421` for SMTP,
`503` for HTTP) and closes it before the real protocol is even built. Clients are counted by
`client_key`: an IPv4 address, or an IPv6 /64 (one subscriber gets a whole /64, so counting each
IPv6 address apart would be no cap at all).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# What asyncio protocols built by a server's factory look like to the gate (SMTP, aiohttp's handler).
ProtocolFactory = Callable[[], asyncio.BaseProtocol]


def client_key(host: str) -> str:
    """The network a client is counted by: its IPv4 address, or its IPv6 /64 (an IPv4-mapped one as IPv4)."""
    try:
        ip = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host  # a Unix socket path or something else without an address: itself
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def peer_key(transport: asyncio.BaseTransport) -> str:
    """`client_key` of a transport's peer ("unknown" when the socket names none)."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return client_key(str(peer[0]))
    return "unknown"


class ConnectionGate:
    """Counts open connections per client network; `per_client` 0 means no cap (a proxy in front counts)."""

    def __init__(self, per_client: int, refusal: bytes) -> None:
        self.per_client = per_client
        self.refusal = refusal
        self.open: dict[str, int] = {}
        self.refused = 0
        # clients at their cap already logged: one line per episode, not one per knock
        self._warned: set[str] = set()

    def protocol(self, factory: ProtocolFactory) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for `loop.create_server` that admits through this gate to `factory`'s protocol."""
        return lambda: _Gated(self, factory)

    def enter(self, key: str) -> bool:
        """Count one more connection of `key`; False (nothing counted) when it is at its cap."""
        held = self.open.get(key, 0)
        if self.per_client and held >= self.per_client:
            self.refused += 1
            if key not in self._warned:
                self._warned.add(key)
                log.warning("%s holds %d connections (the cap): further ones refused", key, held)
            return False
        self.open[key] = held + 1
        return True

    def leave(self, key: str) -> None:
        """Count one connection of `key` closed."""
        held = self.open.get(key, 0) - 1
        if held > 0:
            self.open[key] = held
        else:
            self.open.pop(key, None)
        self._warned.discard(key)


class _Gated(asyncio.Protocol):
    """Stands between the transport and the real protocol, built only once the connection is admitted."""

    def __init__(self, gate: ConnectionGate, factory: ProtocolFactory) -> None:
        self.gate = gate
        self.factory = factory
        self.key = ""
        self.inner: Any = None  # asyncio.Protocol once admitted (typed loosely: SMTP and aiohttp differ)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.key = peer_key(transport)
        if not self.gate.enter(self.key):
            if isinstance(transport, asyncio.WriteTransport):
                transport.write(self.gate.refusal)  # close() still sends what was written
            transport.close()
            return
        self.inner = self.factory()
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is not None:
            self.gate.leave(self.key)
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self.inner is not None:
            return bool(self.inner.eof_received())
        return None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()
