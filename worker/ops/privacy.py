"""Privacy requests for one address: export everything stored about it, or anonymise it everywhere.

Export gathers the address's emails (queued, and archived in every final state), their attempts, opens and clicks,
tracked links, list entries, inbox events, document signers, signatures and reminders, accounts and
people rows. Erase replaces the address with a fresh `erased-…@erased.invalid` and clears names,
content, IP addresses and user agents in one transaction, so counts, timestamps and statuses stay;
the archive files (of every final state: sent, failed, expired, cancelled, suppressed) are rewritten
just before it commits (should the commit fail, erasing again finishes the job). Each export and
each erasure writes one audit row (`privacy.export`, `privacy.erase`) in its transaction. Signatures are kept unchanged: they are signed evidence, and rewriting
them would break their chain (the report says how many were kept). So are the expected-signer rows
and reminder logs of the documents the address signed (status and completion stay true); `docs
verify` still passes and `privacy export` still lists them. The signer rows of documents it had not
signed are anonymised, and reminders skip them. The address is added to no list unless `suppress`
asks for it.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.masking import ERASED_DOMAIN, mask_address
from worker.core.validation import ValidationError, check_header_text
from worker.ops.archive_catalogue import ADDRESS_LISTS, EMAILS, SEND_LOGS, catalogue, record_for, records
from worker.ops.archive_files import directory_lock, read_archive, write_archive_atomically
from worker.ops.privacy_sql import BEING_SENT, CANCEL_UNSENT, ERASURES, EXPORTS, MENTIONED_IDS
from worker.ops.retention import MAINTENANCE_LOCK_KEY

log = logging.getLogger(__name__)

ERASED = "[erased]"
# What an erased inbox event keeps of its payload: the order, not the person.
ORDER_KEYS = ("order_number", "items", "total", "currency", "locale", "reason")


def address_pattern(addr: str) -> str:
    """A regular expression (Python's and PostgreSQL's) for the address, also with `@` written `%40` as in URLs."""
    local, _, domain = addr.rpartition("@")
    return f"{re.escape(local)}(@|%40){re.escape(domain)}"


def normalise(address: str) -> str:
    """The lower-case form every lookup uses; refuses text that cannot be an address."""
    address = check_header_text("email", address.strip()).lower()
    if "@" not in address or len(address) > 254 or " " in address:
        raise ValidationError("email", f"{address!r} is not an email address")
    return address


def jsonable(value: Any) -> Any:
    """`json.dumps` default for database values: timestamps as ISO 8601, ids and addresses as text."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID | Decimal | ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


# Where each kind of archived record goes in an export.
_EXPORTED_AS = {EMAILS: "archived_emails", SEND_LOGS: "archived_send_logs"}


# One audit row per request, in the request's transaction: who, which address (masked), how many rows.
_AUDIT = "SELECT mailroom.audit(%(action)s, %(actor)s, %(target)s, %(affected)s, %(detail)s::jsonb)"


def _audit(
    cur: psycopg.Cursor[Any],
    action: str,
    actor: str | None,
    masked: str,
    affected: int,
    detail: dict[str, Any],
) -> None:
    """Record a privacy request; `actor` None or empty leaves the database role as the actor."""
    params = {
        "action": action,
        "actor": actor,
        "target": masked,
        "affected": affected,
        "detail": json.dumps(detail),
    }
    cur.execute(_AUDIT, params)


def export_address(
    conn: psycopg.Connection[Any],
    address: str,
    archive_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    *,
    actor: str | None = None,
) -> dict[str, Any]:
    """Everything stored about `address`, table by table, plus its archived emails; JSON-ready with `jsonable`.

    Archived emails of every final state are searched (every archive file). One `privacy.export`
    audit row (by `actor`, the address masked, the rows found) is written in the same transaction.
    `progress` is called with (files done, files) as the archive files are scanned.
    """
    addr = normalise(address)
    result: dict[str, Any] = {"address": addr}
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        result["exported_at"] = cur.execute("SELECT now() AS now").fetchone()["now"]  # type: ignore[index]
        params: dict[str, Any] = {"addr": addr, "ids": []}
        for name, query in EXPORTS.items():
            rows = cur.execute(query, params).fetchall()
            if name == "emails":
                params["ids"] = [row["id"] for row in rows]
            result[name] = rows
        files = catalogue(archive_dir)
        for kind in _EXPORTED_AS.values():
            result[kind] = []
        for file, record in records(files, address=addr, progress=progress):
            result[_EXPORTED_AS[file.kind]].append({"archive_file": file.name, **record})
        counts = {k: len(v) for k, v in result.items() if isinstance(v, list) and v}
        detail = {"rows": counts, "archive_files_searched": len(files)}
        _audit(cur, "privacy.export", actor, mask_address(addr), sum(counts.values()), detail)
    return result


class ErasureInFlight(ValidationError):
    """The address has email in a worker's hands: erasing now would race with its send."""


@dataclass
class ErasureReport:
    """What an erasure changed, per table, and what it deliberately kept."""

    address_masked: str
    replacement: str
    rows: dict[str, int] = field(default_factory=dict)
    cancelled: int = 0
    kept_signatures: int = 0
    archive_files: list[str] = field(default_factory=list)
    suppressed: bool = False

    @property
    def total(self) -> int:
        """Rows changed in the database plus archived emails rewritten."""
        return sum(self.rows.values())


def _anonymise_send_log(record: dict[str, Any], replacement: str, pattern: re.Pattern[str]) -> dict[str, Any]:
    response = record.get("response")
    return record | {
        "recipient_email": pattern.sub(replacement, str(record.get("recipient_email", ""))),
        "response": pattern.sub(replacement, response) if isinstance(response, str) else response,
    }


def _anonymise_record(record: dict[str, Any], replacement: str, pattern: re.Pattern[str]) -> dict[str, Any]:
    erased = dict(record)
    for key in ADDRESS_LISTS:
        if isinstance(erased.get(key), list):
            erased[key] = [pattern.sub(replacement, str(a)) for a in erased[key]]
    erased.update(
        recipient_email=pattern.sub(replacement, str(erased.get("recipient_email", ""))),
        recipient_name=None,
        subject=ERASED,
        text_body=ERASED,
        html_body=None,
        template_data=None,
        headers={},
    )
    for key in ("last_error", "suppression_reason"):
        if isinstance(erased.get(key), str):
            erased[key] = pattern.sub(replacement, erased[key])
    if isinstance(erased.get("tracked_links"), list):
        erased["tracked_links"] = [
            {**link, "url": pattern.sub(replacement, link["url"])}
            if isinstance(link, dict) and isinstance(link.get("url"), str)
            else link
            for link in erased["tracked_links"]
        ]
    if erased.get("error_details") is not None:
        erased["error_details"] = json.loads(pattern.sub(replacement, json.dumps(erased["error_details"])))
    return erased


def _erase_archives(
    directory: Path | None,
    addr: str,
    replacement: str,
    report: ErasureReport,
    progress: Callable[[int, int], None] | None,
) -> None:
    if directory is None or not directory.is_dir():
        return
    # Listed and rewritten under the directory's lock: no other database's maintenance replaces a file
    # between our read and our rename.
    with directory_lock(directory, wait=True):
        _rewrite_archives(directory, addr, replacement, report, progress)


def _rewrite_archives(
    directory: Path,
    addr: str,
    replacement: str,
    report: ErasureReport,
    progress: Callable[[int, int], None] | None,
) -> None:
    pattern = re.compile(address_pattern(addr), re.IGNORECASE)
    files = catalogue(directory)
    for done, file in enumerate(files, start=1):
        # A first pass finds whether the file names the address at all; only then is it rewritten,
        # streamed from the file itself (the new one replaces it by a rename once complete).
        if any(record_for(line, addr) is not None for _, line in read_archive(file.path)):
            anonymise = _anonymise_send_log if file.kind == SEND_LOGS else _anonymise_record
            changed = 0

            def lines(path: Path = file.path, anonymise: Any = anonymise) -> Iterator[str]:
                nonlocal changed
                for _, line in read_archive(path):
                    record = record_for(line, addr)
                    if record is not None:
                        changed += 1
                        line = json.dumps(anonymise(record, replacement, pattern)) + "\n"
                    yield line

            write_archive_atomically(file.path, lines())
            report.archive_files.append(file.name)
            kind = _EXPORTED_AS[file.kind]
            report.rows[kind] = report.rows.get(kind, 0) + changed
        if progress:
            progress(done, len(files))


def _erasure_params(addr: str, anon_local: str, pattern: str, suppress: bool) -> dict[str, Any]:
    """The parameters every statement of `_ERASURES` draws on."""
    return {
        "addr": addr,
        "anon": f"{anon_local}@{ERASED_DOMAIN}",
        "anon_local": anon_local,
        "domain": ERASED_DOMAIN,
        "erased": ERASED,
        "re": pattern,
        "suppress": suppress,
        "order_keys": list(ORDER_KEYS),
    }


def erase_address(
    conn: psycopg.Connection[Any],
    address: str,
    *,
    suppress: bool = False,
    archive_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    actor: str | None = None,
) -> ErasureReport:
    """Anonymise `address` in every table and archive file, in one transaction; see the module docstring.

    Email not yet sent to the address is cancelled (nothing is sent to an erased person); email a
    worker is sending at this moment makes the erasure fail with `ErasureInFlight`, changing nothing. With
    `suppress`, the address stays on (or is added to) the unsubscribe list with source `privacy`.
    `progress` is called with (files done, files) as the archive files are scanned. One
    `privacy.erase` audit row (by `actor`, the address masked, the rows changed) is written in the
    same transaction; a refused erasure writes none.
    """
    addr = normalise(address)
    anon_local = f"erased-{secrets.token_hex(8)}"
    replacement = f"{anon_local}@{ERASED_DOMAIN}"
    report = ErasureReport(address_masked=mask_address(addr), replacement=replacement, suppressed=suppress)
    pattern = address_pattern(addr)  # also a PostgreSQL regular expression
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        _keep_maintenance_out(cur)
        params = _erasure_params(addr, anon_local, pattern, suppress)
        report.cancelled = _cancel_pending_or_refuse(cur, params, report.address_masked)
        params["ids"] = [r["id"] for r in cur.execute(MENTIONED_IDS, params).fetchall()]
        for name, statement in ERASURES:
            report.rows[name] = cur.execute(statement, params).rowcount
        if suppress:
            cur.execute(_SUPPRESS, params)
        row = cur.execute(
            "SELECT count(*) AS n FROM mailroom.signatures WHERE signer_email = %(addr)s", params
        )
        report.kept_signatures = int(row.fetchone()["n"])  # type: ignore[index]
        _erase_archives(archive_dir, addr, replacement, report, progress)
        _audit(cur, "privacy.erase", actor, report.address_masked, report.total, _erasure_detail(report))
    log.info(
        "privacy: erased %s as %s: %d row(s), %d pending email(s) cancelled, %d signature(s) kept",
        report.address_masked,
        replacement,
        report.total,
        report.cancelled,
        report.kept_signatures,
    )
    return report


def _erasure_detail(report: ErasureReport) -> dict[str, Any]:
    """The audit detail of an erasure: counts only (the replacement address stays out of the audit trail)."""
    return {
        "rows": {k: v for k, v in report.rows.items() if v},
        "cancelled": report.cancelled,
        "kept_signatures": report.kept_signatures,
        "archive_files": len(report.archive_files),
        "suppressed": report.suppressed,
    }


_SUPPRESS = (
    "INSERT INTO mailroom.unsubscribe_list (email, source, reason)"
    " VALUES (%(addr)s, 'privacy', 'erasure request') ON CONFLICT (email) DO NOTHING"
)


def _keep_maintenance_out(cur: psycopg.Cursor[dict[str, Any]]) -> None:
    """Maintenance rewrites archive files too: wait for a running one, keep it out until we commit."""
    got = cur.execute("SELECT pg_try_advisory_xact_lock(%s) AS got", (MAINTENANCE_LOCK_KEY,)).fetchone()
    if not (got and got["got"]):
        log.info("privacy: waiting for the running maintenance (archiving) to finish")
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (MAINTENANCE_LOCK_KEY,))


def _cancel_pending_or_refuse(
    cur: psycopg.Cursor[dict[str, Any]], params: dict[str, Any], masked: str
) -> int:
    """Cancel email not yet sent to the address; refuse (raise `ErasureInFlight`) while one is being sent.

    An email a worker is sending right now would come back after the commit with the address in its
    SMTP response and bounce entry, or return to the queue with erased content. Such an erasure is
    refused (nothing changed): the send takes seconds, a dead worker's lease minutes."""
    cancelled = cur.execute(
        CANCEL_UNSENT,
        params,
    ).rowcount
    busy = cur.execute(
        BEING_SENT,
        params,
    ).fetchone()
    assert busy is not None
    if busy["n"]:
        raise ErasureInFlight(
            "email",
            f"{busy['n']} email(s) to {masked} are being sent right now; erase again"
            f" once they are done (at the latest when their lease ends, {busy['until']:%Y-%m-%d %H:%M:%S %Z})",
        )
    return int(cancelled)
