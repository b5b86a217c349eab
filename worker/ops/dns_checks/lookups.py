"""The DNS side of the checks: which resolvers to ask, for how long, and what a failed answer means.

Every query goes through checkdmarc (on dnspython) with the resolvers of `MAILROOM_DNS_SERVERS`, each an
address and a port. checkdmarc keeps one process-wide answer cache keyed by name and type only (not by
resolver), so `fresh_answers` empties it before each check: an operator who has just published a record
sees it, and answers from one set of resolvers never stand in for another's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import dns.exception
import dns.resolver
from dns.nameserver import Do53Nameserver, Nameserver

from worker.core.config import Settings
from worker.core.dns_servers import parse_dns_server

# Whole answers longer than this are refused: no SPF, DKIM or DMARC record needs more than a few KB,
# and a hostile zone should not make us parse megabytes.
MAX_ANSWER_CHARS = 8192


class DnsUnreachable(Exception):
    """The resolvers did not answer (timeout, refused, SERVFAIL): nothing can be said about the records."""


@dataclass(frozen=True)
class Resolvers:
    """Where to ask and how long to wait for each answer."""

    nameservers: tuple[Nameserver, ...] | None  # None: the system's resolvers
    timeout: float

    @classmethod
    def from_settings(cls, settings: Settings) -> Resolvers:
        """`MAILROOM_DNS_SERVERS` and `MAILROOM_DNS_TIMEOUT_SECONDS`."""
        servers = tuple(Do53Nameserver(*parse_dns_server(s)) for s in settings.dns_servers)
        return cls(servers or None, settings.dns_timeout_seconds)

    @property
    def kwargs(self) -> dict[str, object]:
        """The keyword arguments every checkdmarc lookup takes."""
        names: Sequence[Nameserver] | None = list(self.nameservers) if self.nameservers else None
        return {"nameservers": names, "timeout": self.timeout, "retries": 0}

    def describe(self) -> str:
        """The resolvers as an operator wrote them (for a finding's text)."""
        if not self.nameservers:
            return "the system's resolvers"
        return ", ".join(f"{ns.answer_nameserver()}:{ns.answer_port()}" for ns in self.nameservers)


def fresh_answers() -> None:
    """Forget checkdmarc's cached answers (see the module's docstring)."""
    import checkdmarc.utils  # type: ignore[import-untyped]

    checkdmarc.utils.DNS_CACHE.clear()


def unreachable(error: BaseException) -> bool:
    """Whether an exception (or the DNS error checkdmarc wrapped in it) says DNS did not answer at all."""
    seen = 0
    current: BaseException | None = error
    while current is not None and seen < 5:
        if isinstance(current, dns.exception.Timeout | dns.resolver.NoNameservers | OSError):
            return True
        inner = [a for a in getattr(current, "args", ()) if isinstance(a, BaseException)]
        current = inner[0] if inner else current.__cause__ or current.__context__
        seen += 1
    return False


def txt(name: str, resolvers: Resolvers) -> list[str] | None:
    """The TXT records at `name` (each one's strings joined), None when the name has none or does not exist.

    Raises DnsUnreachable when the resolvers do not answer.
    """
    from checkdmarc.utils import query_dns

    try:
        records: list[str] = query_dns(name, "TXT", **resolvers.kwargs)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return None
    except (dns.exception.DNSException, OSError) as exc:
        raise DnsUnreachable(_reason(exc)) from None
    if sum(len(r) for r in records) > MAX_ANSWER_CHARS:
        raise ValueError(f"the TXT records at {name} are longer than {MAX_ANSWER_CHARS} characters")
    return records


def probe(domain: str, resolvers: Resolvers) -> bool:
    """Whether `domain` exists; raises DnsUnreachable when the resolvers do not answer at all.

    One query before the others, so that a dead resolver costs one timeout per domain, not one per record.
    """
    from checkdmarc.utils import query_dns

    try:
        query_dns(domain, "SOA", **resolvers.kwargs)
    except dns.resolver.NXDOMAIN:
        return False
    except dns.resolver.NoAnswer:
        return True  # a name below its zone's apex: it exists, it just has no SOA of its own
    except (dns.exception.DNSException, OSError) as exc:
        raise DnsUnreachable(_reason(exc)) from None
    return True


def _reason(exc: BaseException) -> str:
    if isinstance(exc, dns.exception.Timeout):
        return "no answer in time"
    if isinstance(exc, dns.resolver.NoNameservers):
        return "every resolver failed (SERVFAIL or refused)"
    return type(exc).__name__
