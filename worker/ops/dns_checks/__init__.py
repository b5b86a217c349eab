"""Sender domains checked in DNS: SPF, DKIM, DMARC and MX of each sender's domains, and TLS at its relay.

`run_checks` checks one sender (or all), stores each finding (`mailroom.sender_dns_findings`, the latest
check only) and returns them; `mailroom senders check`, `senders add` and the worker's maintenance call it,
and `mailroom health`, `senders list` and the console's Senders screen read what it stored. Lookups go
through checkdmarc to the resolvers of `MAILROOM_DNS_SERVERS`; DNS that does not answer is a finding.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from worker.core.config import Settings
from worker.ops.dns_checks.check import SenderTarget, check_sender, reserved
from worker.ops.dns_checks.findings import INFO, OK, PROBLEM, SEVERITIES, WARNING, DnsFinding
from worker.ops.dns_checks.lookups import Resolvers, fresh_answers
from worker.ops.dns_checks.store import StoredFinding, standing, stored, summary

__all__ = [
    "INFO",
    "OK",
    "PROBLEM",
    "SEVERITIES",
    "WARNING",
    "DnsFinding",
    "SenderCheck",
    "SenderTarget",
    "StoredFinding",
    "check_sender",
    "reserved",
    "run_checks",
    "standing",
    "stored",
    "summary",
]


@dataclass(frozen=True)
class SenderCheck:
    """One sender's check: its name, when it ran and what it found."""

    sender: str
    checked_at: datetime
    findings: list[DnsFinding]

    @property
    def standing(self) -> str:
        """The worst finding in a few words (`ok`, `warning: ...`, `problem: ...`)."""
        return standing(self.findings)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "sender": self.sender,
            "checked_at": self.checked_at.isoformat(),
            "standing": self.standing,
            "findings": [f.as_dict() for f in self.findings],
        }


def run_checks(
    conn: psycopg.Connection[Any], settings: Settings, name: str | None = None, *, relay: bool = True
) -> list[SenderCheck]:
    """Check one sender account (by name) or all, store what each check found, and return it.

    Raises LookupError for a name no account has. `relay=False` skips the connection to the relay.
    """
    from worker.ops.dns_checks.store import save, targets

    found = targets(conn, settings, name)
    if name is not None and not found:
        raise LookupError(f"no sender account named {name}")
    resolvers = Resolvers.from_settings(settings)
    fresh_answers()
    checks = []
    for target in found:
        findings = check_sender(target, resolvers, relay=relay)
        checks.append(SenderCheck(target.name, save(conn, target.id, findings), findings))
    return checks
