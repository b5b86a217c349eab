"""`MAILROOM_DNS_SERVERS`: the resolvers DNS checks ask, each an IP address with an optional port.

Written `host[:port]` (IPv6 as `[addr]:port`, or a bare address for port 53). Only addresses: a resolver
given by name would need another resolver to find it.
"""

from __future__ import annotations

import ipaddress

DEFAULT_PORT = 53


def parse_dns_server(text: str) -> tuple[str, int]:
    """The address and port of one `host[:port]` entry; ValueError saying why when it is not one."""
    entry = text.strip()
    host, port = entry, DEFAULT_PORT
    if entry.startswith("["):
        close = entry.find("]")
        if close == -1:
            raise ValueError(f"{text!r}: an IPv6 address in brackets needs its closing ]")
        host, rest = entry[1:close], entry[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"{text!r}: expected [address]:port")
            port = _port(text, rest[1:])
    elif entry.count(":") == 1:
        host, raw = entry.split(":")
        port = _port(text, raw)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address (with an optional :port)") from None
    return str(address), port


def _port(text: str, raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return int(raw)


def format_dns_server(address: str, port: int) -> str:
    """The entry written back: `addr`, `addr:port`, or `[v6]:port`."""
    if port == DEFAULT_PORT:
        return address
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
