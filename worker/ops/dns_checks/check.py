"""One sender's DNS check: the From domain, the return-path domain, the DKIM selector and the relay."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.ops.dns_checks.findings import INFO, WARNING, DnsFinding
from worker.ops.dns_checks.lookups import DnsUnreachable, Resolvers, probe
from worker.ops.dns_checks.records import check_dkim, check_dmarc, check_mx
from worker.ops.dns_checks.relay import check_relay_tls, relay_addresses
from worker.ops.dns_checks.spf import check_spf

# RFC 2606 and RFC 6761 names: never a real sender's, and checking them would only ask the internet about
# examples (the test suites and the demo add senders at example.com).
_RESERVED = ("example", "example.com", "example.net", "example.org", "test", "invalid", "localhost", "local")


@dataclass(frozen=True)
class SenderTarget:
    """What the check needs to know about one sender account."""

    id: int
    name: str
    from_email: str
    smtp_host: str
    smtp_port: int
    smtp_security: str
    envelope_domain: str  # the return path's domain: the bounce domain, else the From address's
    dkim_domain: str | None = None
    dkim_selector: str | None = None
    dkim_public: Any = None  # the RSA public key of the stored private key; None when unreadable
    dkim_unreadable: str | None = None  # why the stored key could not be read
    connect_timeout: float = 10.0

    @property
    def from_domain(self) -> str:
        """The domain of the From address."""
        return self.from_email.rpartition("@")[2].lower()


def reserved(domain: str) -> bool:
    """Whether `domain` is a special-use name (RFC 2606, RFC 6761) that no real sender mails from."""
    domain = domain.lower().rstrip(".")
    return any(domain == r or domain.endswith("." + r) for r in _RESERVED)


def check_sender(target: SenderTarget, resolvers: Resolvers, *, relay: bool = True) -> list[DnsFinding]:
    """Every finding about one sender; DNS that does not answer is a finding, never an exception."""
    from_domain, envelope = target.from_domain, target.envelope_domain
    if reserved(from_domain):
        return [
            DnsFinding(
                from_domain,
                INFO,
                "not_checked",
                f"{from_domain} is a reserved example domain (RFC 2606, RFC 6761): nothing to check in DNS",
            )
        ]
    try:
        findings = _dns_findings(target, resolvers)
    except DnsUnreachable as exc:
        findings = [
            DnsFinding(
                from_domain,
                WARNING,
                "dns_unreachable",
                f"DNS did not answer ({exc}; asked {resolvers.describe()}): the records of {from_domain}"
                f" and {envelope} were not checked; see MAILROOM_DNS_SERVERS",
            )
        ]
    if relay:
        timeout = target.connect_timeout
        findings += check_relay_tls(target.smtp_host, target.smtp_port, target.smtp_security, timeout)
    return findings


def _dns_findings(target: SenderTarget, resolvers: Resolvers) -> list[DnsFinding]:
    from_domain, envelope = target.from_domain, target.envelope_domain
    findings: list[DnsFinding] = []
    for domain, role in dict.fromkeys([(from_domain, "From domain"), (envelope, "return-path domain")]):
        if domain == from_domain and role != "From domain":
            continue
        if not probe(domain, resolvers):
            findings.append(
                DnsFinding(
                    domain,
                    WARNING,
                    "domain_missing",
                    f"the {role} {domain} does not exist in DNS: receivers refuse its mail",
                )
            )
    if findings:
        return findings
    addresses, findings = relay_addresses(target.smtp_host, resolvers)
    findings += check_spf(from_domain, "From domain", addresses, resolvers)
    if envelope != from_domain:
        findings += check_spf(envelope, "return-path domain", addresses, resolvers)
    findings += _dkim(target, resolvers)
    findings += check_dmarc(from_domain, target.dkim_domain, envelope, resolvers)
    findings += check_mx(envelope, resolvers)
    return findings


def _dkim(target: SenderTarget, resolvers: Resolvers) -> list[DnsFinding]:
    if target.dkim_domain is None or target.dkim_selector is None:
        return [
            DnsFinding(
                target.from_domain,
                WARNING,
                "dkim_not_configured",
                "the account does not sign with DKIM: Gmail and Yahoo ask bulk senders for it, and DMARC rests"
                " on SPF alone; add a key: mailroom senders edit NAME --dkim-domain ... --dkim-selector ..."
                " --dkim-key-file ...",
            )
        ]
    if target.dkim_public is None:
        name = f"{target.dkim_selector}._domainkey.{target.dkim_domain}"
        return [
            DnsFinding(
                name,
                WARNING,
                "dkim_unchecked",
                f"the stored DKIM key could not be read ({target.dkim_unreadable})",
            )
        ]
    return check_dkim(target.dkim_domain, target.dkim_selector, target.dkim_public, resolvers)
