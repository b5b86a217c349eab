"""The relay: its addresses (for SPF) and whether it offers TLS (STARTTLS in its EHLO reply, or TLS at once).

A probe is one connection: greeting, EHLO, QUIT (or a TLS handshake for implicit TLS); it never logs in
and never sends mail.
"""

from __future__ import annotations

import ipaddress
import smtplib
import socket
import ssl

import dns.exception

from worker.ops.dns_checks.findings import INFO, OK, WARNING, DnsFinding
from worker.ops.dns_checks.lookups import Resolvers

_LOOPBACK_NAMES = ("localhost", "localhost.localdomain")


def relay_addresses(host: str, resolvers: Resolvers) -> tuple[list[str], list[DnsFinding]]:
    """The relay's IPv4 and IPv6 addresses (a literal address is its own), and a finding when it has none."""
    from checkdmarc.utils import DNSException, get_a_records  # type: ignore[import-untyped]

    try:
        return [str(ipaddress.ip_address(host.strip("[]")))], []
    except ValueError:
        pass
    if host.lower() in _LOOPBACK_NAMES:
        return ["127.0.0.1", "::1"], []
    try:
        found = [str(a) for a in get_a_records(host, **resolvers.kwargs)]
    except (DNSException, dns.exception.DNSException, OSError) as exc:
        return [], [
            DnsFinding(host, WARNING, "relay_host_unknown", f"the relay host {host} does not resolve: {exc}")
        ]
    if not found:
        return [], [
            DnsFinding(host, WARNING, "relay_host_unknown", f"the relay host {host} has no A or AAAA record")
        ]
    return found, []


def check_relay_tls(host: str, port: int, security: str, timeout: float) -> list[DnsFinding]:
    """Whether the relay offers TLS, against how the account is set to connect (none, starttls or tls)."""
    where = f"{host}:{port}"
    if security == "tls":
        return _implicit(host, port, timeout)
    try:
        with smtplib.SMTP(host, port, timeout=timeout, local_hostname="mailroom-check.invalid") as smtp:
            smtp.ehlo()
            offered = smtp.has_extn("starttls")
    except (OSError, smtplib.SMTPException) as exc:
        return [
            DnsFinding(
                host,
                WARNING,
                "relay_unreachable",
                f"could not ask the relay {where} what it offers: {_why(exc)}",
            )
        ]
    if offered and security == "starttls":
        return [DnsFinding(host, OK, "relay_starttls", f"the relay {where} offers STARTTLS")]
    if offered:
        return [
            DnsFinding(
                host,
                INFO,
                "relay_tls_unused",
                f"the relay {where} offers STARTTLS but the account connects without TLS:"
                " mailroom senders edit NAME --security starttls",
            )
        ]
    detail = (
        "the account requires STARTTLS, so every send fails"
        if security == "starttls"
        else "mail and any login cross the network in clear"
    )
    return [DnsFinding(host, WARNING, "relay_no_tls", f"the relay {where} does not offer STARTTLS: {detail}")]


def _implicit(host: str, port: int, timeout: float) -> list[DnsFinding]:
    where = f"{host}:{port}"
    context = ssl.create_default_context()
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            version = tls.version()
    except (OSError, ssl.SSLError) as exc:
        return [
            DnsFinding(host, WARNING, "relay_no_tls", f"no TLS handshake with the relay {where}: {_why(exc)}")
        ]
    return [DnsFinding(host, OK, "relay_tls", f"the relay {where} speaks {version} from the first byte")]


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
