"""Signed document acknowledgements (reference 04): Ed25519 signatures in one hash chain per document.

A signature covers a canonical JSON payload (document id, its checksum, signer, signed-at, nonce
and the link to the previous signature), stores the payload's SHA-256 and the base64 signature,
and links to the previous signature of the same document through `prev_hash`, the SHA-256 of that
signature's `payload_hash:signature`. Signers of one document are serialised by a lock on the
document row, and the unique index on `(doc_id, prev_hash)` makes a fork impossible anyway.

This module is also the one import for the whole domain: documents, expected signers, checksums
(`worker.producers.documents.records`) and reminders (`worker.producers.documents.reminders`) are re-exported here.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from worker.core.config import Settings
from worker.core.validation import ValidationError, check_header_text
from worker.producers.documents.records import (
    ChecksumResult,
    Document,
    DocumentNotFound,
    add_document,
    expect_signer,
    get_document,
    signer_address,
    verify_checksum,
)
from worker.producers.documents.reminders import ReminderResult, reminder_candidates, send_reminders
from worker.producers.documents.signing_key import SigningKey, load_signing_key

__all__ = [
    "ChainReport",
    "ChecksumResult",
    "Document",
    "DocumentNotFound",
    "DocumentStatus",
    "ReminderResult",
    "Signature",
    "add_document",
    "canonical_payload",
    "document_status",
    "expect_signer",
    "link_hash",
    "reminder_candidates",
    "send_reminders",
    "sign_document",
    "verify_chain",
    "verify_checksum",
]

PAYLOAD_VERSION = 1


@dataclass(frozen=True)
class Signature:
    """One stored signature."""

    id: int
    doc_id: str
    signer_email: str
    signer_name: str | None
    signed_at: datetime
    nonce: str
    payload: str
    payload_hash: str
    signature: str
    prev_hash: str | None


def _utc_text(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValidationError("signed_at", "a signing time needs a time zone")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def canonical_payload(
    *,
    doc_id: str,
    checksum: str | None,
    checksum_algorithm: str | None,
    signer_email: str,
    signed_at: datetime,
    nonce: str,
    prev_hash: str | None,
    key: str,
) -> str:
    """The exact text a signature covers: sorted-key compact JSON, UTF-8, times in UTC to the microsecond.

    `key` is the signing key's fingerprint, so a signature made with another key is named as such.
    """
    fields = {
        "v": PAYLOAD_VERSION,
        "key": key,
        "doc_id": doc_id,
        "checksum": checksum,
        "checksum_algorithm": checksum_algorithm,
        "signer": signer_email,
        "signed_at": _utc_text(signed_at),
        "nonce": nonce,
        "prev_hash": prev_hash,
    }
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str) -> str:
    """SHA-256 of UTF-8 text, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def link_hash(payload_hash: str, signature: str) -> str:
    """What the next signature's `prev_hash` must be: it commits to this signature's payload and bytes."""
    return sha256_hex(f"{payload_hash}:{signature}")


# After the document lock: the chain's current tail, and the database clock for signed_at.
SELECT_TAIL = """
SELECT clock_timestamp() AS now, t.payload_hash, t.signature
FROM (SELECT 1) one
LEFT JOIN LATERAL (
    SELECT payload_hash, signature FROM mailroom.signatures WHERE doc_id = %s ORDER BY id DESC LIMIT 1
) t ON true
"""
SELECT_EXISTING = "SELECT signed_at FROM mailroom.signatures WHERE doc_id = %s AND signer_email = %s"
SELECT_EXPECTED_NAME = "SELECT name FROM mailroom.expected_signers WHERE doc_id = %s AND email = %s"
INSERT_SIGNATURE = """
INSERT INTO mailroom.signatures
    (doc_id, signer_email, signer_name, signed_at, nonce, payload, payload_hash, signature, prev_hash)
VALUES (%(doc_id)s, %(signer_email)s, %(signer_name)s, %(signed_at)s, %(nonce)s, %(payload)s,
        %(payload_hash)s, %(signature)s, %(prev_hash)s)
RETURNING id
"""
SELECT_CHAIN = """
SELECT id, doc_id, signer_email, signer_name, signed_at, nonce, payload, payload_hash, signature, prev_hash
FROM mailroom.signatures WHERE doc_id = %s ORDER BY id
"""


def _signer_name(
    cur: psycopg.Cursor[dict[str, Any]], doc_id: str, address: str, name: str | None
) -> str | None:
    """The name to sign with (default: the expected signer's); a second signature by a signer is refused."""
    existing = cur.execute(SELECT_EXISTING, (doc_id, address)).fetchone()
    if existing is not None:
        raise ValidationError(
            "email", f"{address} already signed {doc_id} at {_utc_text(existing['signed_at'])}"
        )
    if name is None:
        expected = cur.execute(SELECT_EXPECTED_NAME, (doc_id, address)).fetchone()
        name = (expected["name"] or None) if expected else None
    return name


def sign_document(
    conn: psycopg.Connection[Any],
    doc_id: str,
    email: str,
    *,
    name: str | None = None,
    now: datetime | None = None,
    settings: Settings | None = None,
    key: SigningKey | None = None,
) -> Signature:
    """Sign `doc_id` for `email` in the caller's transaction (the caller commits) and return the signature.

    The document row stays locked until the caller's transaction ends, so concurrent signers of
    one document append to one chain in turn. A second signature by the same signer is refused.
    The name defaults to the expected signer's; `now` defaults to the database clock.
    """
    settings = settings or Settings.from_env()
    address = signer_address(email)
    if name is not None:
        check_header_text("name", name)
    key = key or load_signing_key(settings)
    document = get_document(conn, doc_id, lock=True)
    if conn.info.transaction_status != TransactionStatus.INTRANS:
        raise ValueError("sign_document needs an open transaction: use a non-autocommit connection")
    with conn.cursor(row_factory=dict_row) as cur:
        name = _signer_name(cur, doc_id, address, name)
        tail = cur.execute(SELECT_TAIL, (doc_id,)).fetchone()
        assert tail is not None
        signed_at = now or tail["now"]
        prev_hash = link_hash(tail["payload_hash"], tail["signature"]) if tail["payload_hash"] else None
        nonce = secrets.token_urlsafe(24)
        payload = canonical_payload(
            doc_id=doc_id,
            checksum=document.checksum,
            checksum_algorithm=document.checksum_algorithm,
            signer_email=address,
            signed_at=signed_at,
            nonce=nonce,
            prev_hash=prev_hash,
            key=key.fingerprint,
        )
        row: dict[str, Any] = {
            "doc_id": doc_id,
            "signer_email": address,
            "signer_name": name,
            "signed_at": signed_at,
            "nonce": nonce,
            "payload": payload,
            "payload_hash": sha256_hex(payload),
            "signature": key.sign(payload.encode("utf-8")),
            "prev_hash": prev_hash,
        }
        inserted = cur.execute(INSERT_SIGNATURE, row).fetchone()
    assert inserted is not None
    return Signature(id=int(inserted["id"]), **row)


# ---------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokenSignature:
    """A signature that failed verification, and why."""

    id: int
    signer_email: str
    reasons: tuple[str, ...]

    def describe(self) -> str:
        """One line naming the row and everything wrong with it."""
        return f"signature #{self.id} ({self.signer_email}): {'; '.join(self.reasons)}"


@dataclass(frozen=True)
class ChainReport:
    """The result of checking every signature of one document and the links between them."""

    doc_id: str
    checked: int
    key_fingerprint: str | None
    broken: tuple[BrokenSignature, ...]

    @property
    def ok(self) -> bool:
        """True when every signature verifies and the chain is unbroken."""
        return not self.broken

    @property
    def first_broken(self) -> BrokenSignature | None:
        """The earliest signature (in chain order) that failed."""
        return self.broken[0] if self.broken else None

    def summary(self) -> str:
        """One line for an operator."""
        if self.ok:
            return f"{self.doc_id}: {self.checked} signature(s) verified, chain intact"
        first = self.first_broken
        assert first is not None
        return (
            f"{self.doc_id}: BROKEN at {first.describe()}"
            f" ({len(self.broken)} of {self.checked} signature(s) fail)"
        )


def _row_problems(
    row: dict[str, Any], document: Document, expected_prev: str | None, key: SigningKey
) -> list[str]:
    problems: list[str] = []
    payload: str = row["payload"]
    try:
        fields = json.loads(payload)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        problems.append("payload is not a JSON object")
        fields = {}
    else:
        try:
            rebuilt = canonical_payload(
                doc_id=fields["doc_id"],
                checksum=fields["checksum"],
                checksum_algorithm=fields["checksum_algorithm"],
                signer_email=fields["signer"],
                signed_at=datetime.fromisoformat(fields["signed_at"]),
                nonce=fields["nonce"],
                prev_hash=fields["prev_hash"],
                key=fields["key"],
            )
        except (KeyError, TypeError, ValueError):
            rebuilt = None
        if rebuilt != payload or fields.get("v") != PAYLOAD_VERSION:
            problems.append("payload is not in canonical form")
    stored = {
        "doc_id": row["doc_id"],
        "signer": row["signer_email"],
        "signed_at": _utc_text(row["signed_at"]),
        "nonce": row["nonce"],
        "prev_hash": row["prev_hash"],
    }
    for name, value in stored.items():
        if name in fields and fields[name] != value:
            problems.append(f"payload {name} {fields[name]!r} differs from the stored {value!r}")
    # The signer acknowledged the file with this checksum; the document row must still name that file.
    for name, value in (("checksum", document.checksum), ("checksum_algorithm", document.checksum_algorithm)):
        if name in fields and fields[name] != value:
            problems.append(f"signed {name} {fields[name]!r} differs from the document's {value!r}")
    if sha256_hex(payload) != row["payload_hash"]:
        problems.append("payload_hash is not the SHA-256 of the payload")
    if not key.verify(payload.encode("utf-8"), row["signature"]):
        problems.append("Ed25519 signature does not verify")
        if "key" in fields and fields["key"] != key.fingerprint:
            problems.append(f"it was made with key {fields['key']}, not the configured key {key.fingerprint}")
    if row["prev_hash"] != expected_prev:
        problems.append(
            "prev_hash should be empty (first signature)"
            if expected_prev is None
            else "prev_hash does not link to the previous signature"
        )
    return problems


def verify_chain(
    conn: psycopg.Connection[Any],
    doc_id: str,
    *,
    settings: Settings | None = None,
    key: SigningKey | None = None,
) -> ChainReport:
    """Check every signature of `doc_id` (payload, hash, Ed25519 signature) and every link, in chain order.

    A signature whose signed checksum is no longer the document's is broken too: it acknowledged another file.
    """
    document = get_document(conn, doc_id)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(SELECT_CHAIN, (doc_id,)).fetchall()
    if not rows:
        return ChainReport(doc_id, 0, None, ())
    key = key or load_signing_key(settings or Settings.from_env(), create=False)
    broken: list[BrokenSignature] = []
    expected_prev: str | None = None
    for row in rows:
        problems = _row_problems(row, document, expected_prev, key)
        if problems:
            broken.append(BrokenSignature(int(row["id"]), row["signer_email"], tuple(problems)))
        expected_prev = link_hash(row["payload_hash"], row["signature"])
    return ChainReport(doc_id, len(rows), key.fingerprint, tuple(broken))


SELECT_DOC_IDS = "SELECT doc_id FROM mailroom.documents ORDER BY doc_id"


def all_doc_ids(conn: psycopg.Connection[Any]) -> list[str]:
    """Every document id, in order."""
    with conn.cursor(row_factory=dict_row) as cur:
        return [str(r["doc_id"]) for r in cur.execute(SELECT_DOC_IDS).fetchall()]


# ---------------------------------------------------------------------------
# Completion status
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SignerState:
    """An expected signer, or an unexpected one who signed anyway."""

    email: str
    name: str
    locale: str | None
    signed_at: datetime | None
    reminders: int
    last_reminded_at: datetime | None


@dataclass(frozen=True)
class DocumentStatus:
    """Who was expected, who signed, who is missing and who signed unexpectedly."""

    document: Document
    expected: tuple[SignerState, ...]
    unexpected: tuple[SignerState, ...]

    @property
    def signed(self) -> int:
        """Expected signers who signed."""
        return sum(1 for s in self.expected if s.signed_at is not None)

    @property
    def missing(self) -> tuple[SignerState, ...]:
        """Expected signers who have not signed."""
        return tuple(s for s in self.expected if s.signed_at is None)

    @property
    def completion_pct(self) -> float | None:
        """Share of expected signers who signed, in percent (two decimals); None when nobody is expected."""
        if not self.expected:
            return None
        return round(100.0 * self.signed / len(self.expected), 2)


SELECT_EXPECTED_STATE = """
SELECT e.email, e.name, e.locale, s.signed_at,
       (SELECT count(*) FROM mailroom.reminder_logs r
        WHERE r.doc_id = e.doc_id AND r.recipient_email = e.email) AS reminders,
       (SELECT max(requested_at) FROM mailroom.reminder_logs r
        WHERE r.doc_id = e.doc_id AND r.recipient_email = e.email) AS last_reminded_at
FROM mailroom.expected_signers e
LEFT JOIN mailroom.signatures s ON s.doc_id = e.doc_id AND s.signer_email = e.email
WHERE e.doc_id = %s
ORDER BY e.id
"""
SELECT_UNEXPECTED = """
SELECT s.signer_email AS email, coalesce(s.signer_name, '') AS name, NULL AS locale, s.signed_at,
       0 AS reminders, NULL::timestamptz AS last_reminded_at
FROM mailroom.signatures s
LEFT JOIN mailroom.expected_signers e ON e.doc_id = s.doc_id AND e.email = s.signer_email
WHERE s.doc_id = %s AND e.id IS NULL
ORDER BY s.id
"""


def document_status(conn: psycopg.Connection[Any], doc_id: str) -> DocumentStatus:
    """Completion of one document: expected and unexpected signers with their signing and reminder state."""
    document = get_document(conn, doc_id)
    with conn.cursor(row_factory=dict_row) as cur:
        expected = [SignerState(**r) for r in cur.execute(SELECT_EXPECTED_STATE, (doc_id,)).fetchall()]
        unexpected = [SignerState(**r) for r in cur.execute(SELECT_UNEXPECTED, (doc_id,)).fetchall()]
    return DocumentStatus(document, tuple(expected), tuple(unexpected))
