"""Signed document acknowledgements (reference 04): Ed25519 signatures in one hash chain per document.

A signature covers a canonical JSON payload (`worker.producers.documents.chain`: the document and its
checksum, the signer's address and name, signed-at, nonce, the link to the previous signature and the
position in the chain), stores the payload's SHA-256 and the base64 signature, and links to the previous
signature of the same document through `prev_hash`, the SHA-256 of that signature's
`payload_hash:signature`. Signers of one document are serialised by a lock on the document row, and the
unique indexes on `(doc_id, prev_hash)` and `(doc_id, seq)` make a fork impossible anyway. Signatures are
append-only in the database, and the chain head it keeps per document
(`worker.producers.documents.heads`) makes a deleted signature visible to `verify_chain`.

This module is also the one import for the whole domain: documents, expected signers, checksums
(`worker.producers.documents.records`) and reminders (`worker.producers.documents.reminders`) are re-exported here.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from worker.core.config import Settings
from worker.core.signing_desk import Proof
from worker.core.validation import ValidationError, check_header_text
from worker.producers.documents.chain import (
    PAYLOAD_VERSION,
    canonical_payload,
    link_hash,
    row_problems,
    sha256_hex,
    utc_text,
)
from worker.producers.documents.heads import (
    ChainHead,
    chain_heads,
    describe_missing,
    export_findings,
    head_findings,
    remove_signatures,
)
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
    "PAYLOAD_VERSION",
    "ChainHead",
    "ChainReport",
    "ChecksumResult",
    "Document",
    "DocumentNotFound",
    "DocumentStatus",
    "ReminderResult",
    "Signature",
    "add_document",
    "canonical_payload",
    "chain_heads",
    "document_status",
    "expect_signer",
    "link_hash",
    "reminder_candidates",
    "remove_signatures",
    "send_reminders",
    "sha256_hex",
    "sign_document",
    "verify_chain",
    "verify_checksum",
]


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
    seq: int


# After the document lock: the chain head (the trigger on INSERT moves it) and the database clock for signed_at.
SELECT_HEAD = """
SELECT clock_timestamp() AS now, coalesce(h.count, 0) AS count, h.last_hash
FROM (SELECT 1) one
LEFT JOIN mailroom.signature_heads h ON h.doc_id = %s
"""
SELECT_EXISTING = "SELECT signed_at FROM mailroom.signatures WHERE doc_id = %s AND signer_email = %s"
SELECT_EXPECTED_NAME = "SELECT name FROM mailroom.expected_signers WHERE doc_id = %s AND email = %s"
INSERT_SIGNATURE = """
INSERT INTO mailroom.signatures
    (doc_id, signer_email, signer_name, signed_at, nonce, payload, payload_hash, signature, prev_hash, seq,
     user_sub, referer, ip_address, user_agent)
VALUES (%(doc_id)s, %(signer_email)s, %(signer_name)s, %(signed_at)s, %(nonce)s, %(payload)s,
        %(payload_hash)s, %(signature)s, %(prev_hash)s, %(seq)s,
        %(user_sub)s, %(referer)s, %(ip_address)s, %(user_agent)s)
RETURNING id
"""
SELECT_CHAIN = """
SELECT id, doc_id, signer_email, signer_name, signed_at, nonce, payload, payload_hash, signature, prev_hash, seq
FROM mailroom.signatures WHERE doc_id = %s ORDER BY seq, id
"""


def _signer_name(
    cur: psycopg.Cursor[dict[str, Any]], doc_id: str, address: str, name: str | None
) -> str | None:
    """The name to sign with (default: the expected signer's); a second signature by a signer is refused."""
    existing = cur.execute(SELECT_EXISTING, (doc_id, address)).fetchone()
    if existing is not None:
        raise ValidationError(
            "email", f"{address} already signed {doc_id} at {utc_text(existing['signed_at'])}"
        )
    if name is None:
        expected = cur.execute(SELECT_EXPECTED_NAME, (doc_id, address)).fetchone()
        name = (expected["name"] or None) if expected else None
    return name


def _signed_row(
    document: Document,
    address: str,
    name: str | None,
    head: dict[str, Any],
    signed_at: datetime,
    key: SigningKey,
) -> dict[str, Any]:
    """The row to insert: a version 2 payload at the chain's next position, and its Ed25519 signature."""
    # The head, not the newest row left: a signature deleted behind the head's back stays a visible gap.
    prev_hash: str | None = head["last_hash"]
    seq = int(head["count"]) + 1
    nonce = secrets.token_urlsafe(24)
    payload = canonical_payload(
        doc_id=document.doc_id,
        checksum=document.checksum,
        checksum_algorithm=document.checksum_algorithm,
        signer_email=address,
        signer_name=name,
        signed_at=signed_at,
        nonce=nonce,
        prev_hash=prev_hash,
        seq=seq,
        key=key.fingerprint,
    )
    return {
        "doc_id": document.doc_id,
        "signer_email": address,
        "signer_name": name,
        "signed_at": signed_at,
        "nonce": nonce,
        "payload": payload,
        "payload_hash": sha256_hex(payload),
        "signature": key.sign(payload.encode("utf-8")),
        "prev_hash": prev_hash,
        "seq": seq,
    }


def sign_document(
    conn: psycopg.Connection[Any],
    doc_id: str,
    email: str,
    *,
    name: str | None = None,
    now: datetime | None = None,
    settings: Settings | None = None,
    key: SigningKey | None = None,
    proof: Proof | None = None,
) -> Signature:
    """Sign `doc_id` for `email` in the caller's transaction (the caller commits) and return the signature.

    `proof` (the signing page's) records the identity the signer proved and where the request came from.

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
        head = cur.execute(SELECT_HEAD, (doc_id,)).fetchone()
        assert head is not None
        row = _signed_row(document, address, name, head, now or head["now"], key)
        provenance: dict[str, str | None] = {
            "user_sub": None,
            "referer": None,
            "ip_address": None,
            "user_agent": None,
        }
        if proof is not None:
            provenance = {"user_sub": proof.user_sub, "referer": proof.referer,
                          "ip_address": proof.ip_address, "user_agent": proof.user_agent}  # fmt: skip
        inserted = cur.execute(INSERT_SIGNATURE, {**row, **provenance}).fetchone()
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
    """The result of checking every signature of one document, the links between them and its chain head."""

    doc_id: str
    checked: int
    key_fingerprint: str | None
    broken: tuple[BrokenSignature, ...]
    head: ChainHead | None = None
    missing: tuple[int, ...] = ()
    head_problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every signature verifies, the chain is unbroken and every position the head records is there."""
        return not self.broken and not self.missing and not self.head_problems

    @property
    def first_broken(self) -> BrokenSignature | None:
        """The earliest signature (in chain order) that failed."""
        return self.broken[0] if self.broken else None

    def problems(self) -> list[str]:
        """Every problem, one line each: missing positions first, then the head's, then broken rows."""
        lines = [describe_missing(self.missing, self.head.count)] if self.missing and self.head else []
        return lines + list(self.head_problems) + [b.describe() for b in self.broken]

    def summary(self) -> str:
        """One line for an operator."""
        if self.ok:
            return f"{self.doc_id}: {self.checked} signature(s) verified, chain intact"
        first = self.first_broken
        if self.missing or self.head_problems or first is None:
            return f"{self.doc_id}: BROKEN: {self.problems()[0]}"
        return (
            f"{self.doc_id}: BROKEN at {first.describe()}"
            f" ({len(self.broken)} of {self.checked} signature(s) fail)"
        )


SELECT_ONE_HEAD = (
    "SELECT doc_id, count, last_hash, updated_at FROM mailroom.signature_heads WHERE doc_id = %s"
)


def verify_chain(
    conn: psycopg.Connection[Any],
    doc_id: str,
    *,
    settings: Settings | None = None,
    key: SigningKey | None = None,
    exported: ChainHead | None = None,
    exported_at: datetime | None = None,
) -> ChainReport:
    """Check every signature of `doc_id` (payload, hash, Ed25519 signature), every link and the chain head.

    A signature whose signed checksum is no longer the document's is broken too: it acknowledged another
    file. Positions the database's head records but no row holds are named (a deleted signature), and
    with `exported` (a head exported earlier) so are positions removed since then, head rewritten or not.
    """
    document = get_document(conn, doc_id)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(SELECT_CHAIN, (doc_id,)).fetchall()
        found = cur.execute(SELECT_ONE_HEAD, (doc_id,)).fetchone()
    head = ChainHead(**found) if found else None
    missing, head_problems = head_findings(rows, head)
    if exported is not None:
        head_problems += export_findings(conn, rows, exported, exported_at)
    broken: list[BrokenSignature] = []
    fingerprint: str | None = None
    if rows:
        key = key or load_signing_key(settings or Settings.from_env(), create=False)
        fingerprint = key.fingerprint
        expected_prev: str | None = None
        for row in rows:
            problems = row_problems(row, document, expected_prev, key)
            if problems:
                broken.append(BrokenSignature(int(row["id"]), row["signer_email"], tuple(problems)))
            expected_prev = link_hash(row["payload_hash"], row["signature"])
    return ChainReport(doc_id, len(rows), fingerprint, tuple(broken), head, missing, tuple(head_problems))


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


# A signer who signed is shown with the name they signed with (covered by the signature), not the
# expected signer's name as edited since.
SELECT_EXPECTED_STATE = """
SELECT e.email, coalesce(s.signer_name, e.name) AS name, e.locale, s.signed_at,
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
