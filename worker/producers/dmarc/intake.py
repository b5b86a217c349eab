"""DMARC reports arriving as mail: which messages are reports, and what becomes of each.

A report is mail addressed to the `dmarc` local part of any domain the bounce intake serves
(publish `rua=mailto:dmarc@<bounce domain>`): the envelope recipient when the receiver knows it,
else Delivered-To, X-Original-To or To of a message fetched from the bounce mailbox. Such a message
is never read as a bounce. It ends like every input: stored, seen before, or refused and kept in the
bounce quarantine with the reason (bounded and retained like the quarantine's other messages).

`take_report` is the one way in, for mail and for `mailroom dmarc ingest` alike: the report's header
is judged (ours? within the bounds?) before any record is read, so a stranger's report costs its
header; a report that came by mail is held to `MAILED_LIMITS`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from email.parser import BytesHeaderParser
from email.utils import getaddresses
from typing import Any

import psycopg

from worker.core.config import Settings
from worker.core.failover import database_unavailable
from worker.producers.bounces.effects import quarantine
from worker.producers.bounces.intake import Outcome
from worker.producers.dmarc.limits import DEFAULT_LIMITS, MAILED_LIMITS, ReportRefused
from worker.producers.dmarc.parse import ReportHeader, parse_report
from worker.producers.dmarc.store import ArrivedBy, Bounds, Stored, admit, sender_domains, store_report

log = logging.getLogger(__name__)

LOCAL_PART = "dmarc"
HEADERS = ("delivered-to", "x-original-to", "to")
HEADER_BYTES = 64 * 1024  # the header block read to route a mailbox message (the parser is not run on more)


def is_report_address(address: str) -> bool:
    """Whether `address` is dmarc@ some domain (any case; a +detail is allowed)."""
    local, at, _domain = address.strip().strip("<>").rpartition("@")
    return bool(at) and local.split("+", 1)[0].lower() == LOCAL_PART


def addressed_to_dmarc(raw: bytes, envelope_recipients: Sequence[str] = ()) -> bool:
    """Whether a message is for the DMARC intake: by its envelope when known, else by its headers."""
    if envelope_recipients:
        return any(is_report_address(r) for r in envelope_recipients)
    head = raw[:HEADER_BYTES].split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0]
    headers = BytesHeaderParser().parsebytes(head)
    values = [str(v) for name in HEADERS for v in headers.get_all(name, [])][:50]
    return any(is_report_address(address) for _name, address in getaddresses(values)[:50])


def take_report(
    conn: psycopg.Connection[Any], data: bytes, arrived_by: ArrivedBy, bounds: Bounds | None = None
) -> Stored:
    """Read the report in `data` and store it, or `ReportRefused`: judged on its header first (not our
    domain, or past a bound, it is refused before its records are read), then whole."""
    bounds = bounds or Bounds.from_settings(Settings.from_env())
    domains = sender_domains(conn)
    limits = DEFAULT_LIMITS if arrived_by == "cli" else MAILED_LIMITS

    def decide(header: ReportHeader) -> None:
        admit(conn, header, domains, bounds)

    return store_report(conn, parse_report(data, limits, decide=decide), arrived_by, bounds)


def ingest_report(
    conn: psycopg.Connection[Any],
    raw: bytes,
    arrived_by: ArrivedBy,
    envelope_recipients: Sequence[str] = (),
    *,
    client: str | None = None,
) -> Outcome:
    """Store the report a message carries: recorded, duplicate, or quarantined with the reason.

    A refusal is permanent (malformed, over a cap or a bound, not our domain, disputing a stored
    report): quarantined, never retried. A database that cannot be reached raises, so the receiver
    answers 451 and the mailbox keeps it."""
    envelope = envelope_recipients[0] if envelope_recipients else None
    try:
        stored = take_report(conn, raw, arrived_by)
    except ReportRefused as exc:
        return _refused(conn, raw, f"DMARC report refused: {exc}", envelope, client)
    except psycopg.Error as exc:
        if database_unavailable(exc):
            raise  # the receiver answers 451, the mailbox keeps it: nothing about the report
        return _refused(
            conn, raw, f"DMARC report refused by the database: {type(exc).__name__}", envelope, client
        )
    log.info("dmarc: %s", stored.summary())
    return Outcome("recorded" if stored.new else "duplicate", stored.summary())


def _refused(
    conn: psycopg.Connection[Any], raw: bytes, reason: str, envelope: str | None, client: str | None
) -> Outcome:
    with conn.transaction():
        quarantine(conn, raw, reason, envelope, client=client)
    log.warning("dmarc: %s", reason)
    return Outcome("quarantined", reason)
