"""The findings in the database: read the senders to check, replace a sender's findings, read them back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row

from worker.core.config import ConfigError, Settings
from worker.core.crypto import secret_box
from worker.ops.dns_checks.check import SenderTarget
from worker.ops.dns_checks.findings import PROBLEM, WARNING, DnsFinding

TARGETS = """
SELECT id, name, from_email, smtp_host, smtp_port, smtp_security, bounce_domain, dkim_domain, dkim_selector,
       dkim_private_key_encrypted, connect_timeout_seconds
FROM mailroom.sender_accounts
WHERE %(name)s::text IS NULL OR name = %(name)s
ORDER BY name
"""

REPLACE = "DELETE FROM mailroom.sender_dns_findings WHERE sender_account_id = %s"
INSERT = """
INSERT INTO mailroom.sender_dns_findings (sender_account_id, checked_at, domain, severity, code, detail)
VALUES (%s, %s, %s, %s, %s, %s)
"""

FINDINGS = """
SELECT s.name, f.checked_at, f.domain, f.severity, f.code, f.detail
FROM mailroom.sender_dns_findings f JOIN mailroom.sender_accounts s ON s.id = f.sender_account_id
WHERE (%(name)s::text IS NULL OR s.name = %(name)s)
  AND (%(worst)s::boolean IS FALSE OR f.severity IN ('warning', 'problem'))
ORDER BY s.name, f.id
"""


@dataclass(frozen=True)
class StoredFinding:
    """One stored finding with its sender and when it was checked."""

    sender: str
    checked_at: datetime
    finding: DnsFinding


def targets(conn: psycopg.Connection[Any], settings: Settings, name: str | None = None) -> list[SenderTarget]:
    """The sender accounts to check (one by name, or all), with the public half of each DKIM key."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(TARGETS, {"name": name}).fetchall()
    return [_target(row, settings) for row in rows]


def _target(row: dict[str, Any], settings: Settings) -> SenderTarget:
    public, unreadable = None, None
    if row["dkim_private_key_encrypted"] is not None:
        try:
            public, unreadable = _public_key(bytes(row["dkim_private_key_encrypted"]), settings), None
        except (ConfigError, ValueError, TypeError) as exc:
            unreadable = str(exc)
    from_domain = str(row["from_email"]).rpartition("@")[2].lower()
    return SenderTarget(
        id=int(row["id"]),
        name=row["name"],
        from_email=row["from_email"],
        smtp_host=row["smtp_host"],
        smtp_port=int(row["smtp_port"]),
        smtp_security=row["smtp_security"],
        envelope_domain=(row["bounce_domain"] or settings.bounce_domain or from_domain).lower(),
        dkim_domain=row["dkim_domain"],
        dkim_selector=row["dkim_selector"],
        dkim_public=public,
        dkim_unreadable=unreadable,
        connect_timeout=float(row["connect_timeout_seconds"] or settings.smtp_connect_timeout),
    )


def _public_key(encrypted: bytes, settings: Settings) -> Any:
    from cryptography.hazmat.primitives import serialization

    pem = secret_box(settings).decrypt(encrypted).encode("ascii")
    return serialization.load_pem_private_key(pem, password=None).public_key()


def save(conn: psycopg.Connection[Any], sender_id: int, findings: Sequence[DnsFinding]) -> datetime:
    """Replace the sender's findings with these, in one transaction; return the check's time."""
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute("SELECT now()").fetchone()
        assert row is not None
        now: datetime = row[0]
        cur.execute(REPLACE, (sender_id,))
        cur.executemany(INSERT, [(sender_id, now, f.domain, f.severity, f.code, f.detail) for f in findings])
    return now


def stored(
    conn: psycopg.Connection[Any], name: str | None = None, *, worst: bool = False
) -> list[StoredFinding]:
    """The stored findings (of one sender, or all); only warnings and problems with `worst`."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(FINDINGS, {"name": name, "worst": worst}).fetchall()
    return [
        StoredFinding(
            r["sender"] if "sender" in r else r["name"],
            r["checked_at"],
            DnsFinding(r["domain"], r["severity"], r["code"], r["detail"]),
        )
        for r in rows
    ]


def summary(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """Per sender name, its DNS standing in a few words: `ok`, `2 warnings`, `problem: dkim_mismatch`, ..."""
    found: dict[str, list[DnsFinding]] = {}
    for s in stored(conn):
        found.setdefault(s.sender, []).append(s.finding)
    return {name: standing(findings) for name, findings in found.items()}


def standing(findings: Sequence[DnsFinding]) -> str:
    """The worst of a sender's findings in a few words."""
    problems = [f.code for f in findings if f.severity == PROBLEM]
    warnings = [f.code for f in findings if f.severity == WARNING]
    if problems:
        return "problem: " + ", ".join(dict.fromkeys(problems))
    if warnings:
        return "warning: " + ", ".join(dict.fromkeys(warnings))
    return "ok"
