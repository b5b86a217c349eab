"""A DNS server in the test process (dnslib, UDP and TCP on 127.0.0.1, one random port) serving zones a
test writes as a dict, for the DNS checks of sender domains."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dnslib import AAAA, CNAME, MX, QTYPE, RCODE, RR, SOA, TXT, A  # type: ignore[import-untyped]
from dnslib.server import BaseResolver, DNSLogger, DNSServer  # type: ignore[import-untyped]

# name -> {type -> [values]}: TXT values are strings (split into 255-byte strings as DNS needs), MX values
# "preference host", A/AAAA addresses, CNAME a name. A name listed with no types exists but has nothing.
Zone = dict[str, dict[str, list[str]]]


def _txt(value: str) -> TXT:
    data = value.encode()
    return TXT([data[i : i + 255] for i in range(0, len(data), 255)] or [b""])


def _rdata(kind: str, value: str) -> Any:
    if kind == "TXT":
        return _txt(value)
    if kind == "A":
        return A(value)
    if kind == "AAAA":
        return AAAA(value)
    if kind == "MX":
        preference, host = value.split()
        return MX(host, int(preference))
    if kind == "CNAME":
        return CNAME(value)
    if kind == "SOA":
        return SOA("ns.invalid", "hostmaster.invalid", (1, 3600, 600, 86400, 60))
    raise ValueError(kind)


@dataclass
class ZoneResolver(BaseResolver):  # type: ignore[misc]
    """Answers from `zone`; `silent` drops every query (a resolver that never answers), `servfail` fails it."""

    zone: Zone = field(default_factory=dict)
    silent: bool = False
    servfail: bool = False
    queries: list[tuple[str, str]] = field(default_factory=list)

    def resolve(self, request: Any, handler: Any) -> Any:
        """The answer to one query."""
        name = str(request.q.qname).rstrip(".").lower()
        kind = QTYPE[request.q.qtype]
        self.queries.append((name, kind))
        if self.silent:
            return None
        reply = request.reply()
        if self.servfail:
            reply.header.rcode = RCODE.SERVFAIL
            return reply
        records = self.zone.get(name)
        if records is None:
            # NXDOMAIN, unless a name below it exists (an empty non-terminal)
            if not any(other.endswith("." + name) for other in self.zone):
                reply.header.rcode = RCODE.NXDOMAIN
            return reply
        for value in records.get(kind, []):
            reply.add_answer(RR(name, QTYPE.reverse[kind], rdata=_rdata(kind, value), ttl=60))
        return reply


class _QuietLogger(DNSLogger):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__(log="-request,-reply,-truncated,-error,-recv,-send,-data", prefix=False)


def _free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (asked of UDP, then checked on TCP)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port = int(udp.getsockname()[1])
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            try:
                tcp.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port for the test DNS server")


@contextmanager
def dns_server(zone: Zone) -> Iterator[tuple[ZoneResolver, str]]:
    """Serve `zone` on UDP and TCP; yield its resolver (change `zone` or `silent` live) and `127.0.0.1:PORT`."""
    resolver = ZoneResolver(zone)
    port = _free_port()
    servers = [
        DNSServer(resolver, address="127.0.0.1", port=port, tcp=tcp, logger=_QuietLogger())
        for tcp in (False, True)
    ]
    for server in servers:
        # A short poll: stopping waits for the loop to look (socketserver's default is half a second).
        threading.Thread(
            target=server.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
    try:
        yield resolver, f"127.0.0.1:{port}"
    finally:
        for server in servers:
            server.stop()
            server.server.server_close()


def closed_port() -> str:
    """`127.0.0.1:PORT` where nothing listens (UDP queries there are refused or never answered)."""
    return f"127.0.0.1:{_free_port()}"


def rsa_pem(bits: int = 1024) -> bytes:
    """A fresh RSA private key in PKCS#1 PEM (1024 bits: the shortest Mailroom accepts, and quick to make)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def good_zone(domain: str, dkim_record: str, *, relay: str = "127.0.0.1", selector: str = "s1") -> Zone:
    """A domain whose DNS lets its mail land: SPF authorising `relay` (through an include), DKIM, DMARC
    p=reject with reports, and an MX."""
    return {
        domain: {"SOA": ["-"], "TXT": [f"v=spf1 include:_spf.{domain} -all"], "MX": [f"10 mx.{domain}"]},
        f"_spf.{domain}": {"TXT": [f"v=spf1 ip4:{relay} ~all"]},
        f"mx.{domain}": {"A": ["192.0.2.25"]},
        f"{selector}._domainkey.{domain}": {"TXT": [dkim_record]},
        f"_dmarc.{domain}": {"TXT": [f"v=DMARC1; p=reject; rua=mailto:dmarc@{domain}"]},
    }


class EhloServer:
    """A one-thread SMTP stand-in on 127.0.0.1 that greets, answers EHLO with `extensions` and closes on QUIT:
    enough for the relay probe, which never goes further."""

    def __init__(self, extensions: tuple[str, ...]) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = int(self.sock.getsockname()[1])
        self.extensions = extensions
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            with client, client.makefile("rwb") as f:
                f.write(b"220 stand-in ESMTP\r\n")
                f.flush()
                for line in f:
                    verb = line[:4].upper()
                    if verb in (b"EHLO", b"HELO"):
                        lines = ["stand-in", *self.extensions]
                        for i, text in enumerate(lines):
                            sep = " " if i == len(lines) - 1 else "-"
                            f.write(f"250{sep}{text}\r\n".encode())
                    elif verb == b"QUIT":
                        f.write(b"221 bye\r\n")
                        f.flush()
                        break
                    else:
                        f.write(b"502 not here\r\n")
                    f.flush()

    def close(self) -> None:
        """Stop listening."""
        self.sock.close()
