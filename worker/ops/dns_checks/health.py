"""The stored DNS findings as `mailroom health` sees them: a problem when DKIM does not verify, else a warning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from worker.ops.dns_checks.findings import PROBLEM
from worker.ops.dns_checks.store import stored


@dataclass(frozen=True)
class DnsHealth:
    """One stored warning or problem, worded for `mailroom health` and the console's banner."""

    severity: str  # warning or problem (the health module's own words)
    text: str
    advice: str
    sender: str


def dns_health(conn: psycopg.Connection[Any]) -> list[DnsHealth]:
    """Every stored warning and problem of the senders' latest DNS checks."""
    return [
        DnsHealth(
            PROBLEM if s.finding.severity == PROBLEM else "warning",
            f"sender {s.sender}: {s.finding.detail} ({s.finding.code})",
            f"mailroom senders check {s.sender} after fixing it",
            s.sender,
        )
        for s in stored(conn, worst=True)
    ]
