"""Documents to acknowledge, their expected signers, and checksum verifications of their files (reference 04)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row

from worker.core.config import Settings
from worker.core.outbox import load_catalog
from worker.core.validation import ValidationError, check_header_text, normalise_address

ALGORITHMS = {"SHA-256": "sha256", "SHA-512": "sha512"}
REMINDER_TEMPLATE = "signature_reminder"
_DOC_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_HEX = {"SHA-256": re.compile(r"^[0-9a-f]{64}$"), "SHA-512": re.compile(r"^[0-9a-f]{128}$")}
_URL = re.compile(r"^https?://\S+$", re.IGNORECASE)
_CHUNK = 1 << 20


class DocumentNotFound(ValidationError):
    """No document has this id."""

    def __init__(self, doc_id: str) -> None:
        super().__init__("doc_id", f"no document {doc_id!r}; add it with `mailroom docs add`")
        self.doc_id = doc_id


@dataclass(frozen=True)
class Document:
    """One document signers acknowledge."""

    doc_id: str
    title: str
    url: str
    checksum: str | None
    checksum_algorithm: str | None
    description: str
    created_by: str
    created_at: datetime


@dataclass(frozen=True)
class ChecksumResult:
    """One recorded checksum verification."""

    id: int
    doc_id: str
    algorithm: str
    stored_checksum: str | None
    calculated_checksum: str
    is_valid: bool
    error_message: str | None


INSERT_DOCUMENT = """
INSERT INTO mailroom.documents (doc_id, title, url, checksum, checksum_algorithm, description, created_by,
                                require_login)
VALUES (%(doc_id)s, %(title)s, %(url)s, %(checksum)s, %(algorithm)s, %(description)s, %(created_by)s,
        %(require_login)s)
ON CONFLICT (doc_id) DO NOTHING
RETURNING doc_id
"""
SELECT_DOCUMENT = """
SELECT doc_id, title, url, checksum, checksum_algorithm, description, created_by, created_at
FROM mailroom.documents WHERE doc_id = %s
"""
# Signing and reminding lock the document row: one signer or reminder run per document at a time.
# NO KEY UPDATE does not block foreign-key checks of other tables against the document.
LOCK_DOCUMENT = SELECT_DOCUMENT + " FOR NO KEY UPDATE"
UPSERT_SIGNER = """
INSERT INTO mailroom.expected_signers (doc_id, email, name, locale, added_by, notes)
VALUES (%(doc_id)s, %(email)s, %(name)s, %(locale)s, %(added_by)s, %(notes)s)
ON CONFLICT (doc_id, email) DO UPDATE
SET name = EXCLUDED.name, locale = EXCLUDED.locale, notes = coalesce(EXCLUDED.notes, expected_signers.notes)
RETURNING id, (xmax = 0) AS inserted
"""
INSERT_VERIFICATION = """
INSERT INTO mailroom.checksum_verifications
    (doc_id, verified_by, stored_checksum, calculated_checksum, algorithm, is_valid, error_message)
VALUES (%(doc_id)s, %(verified_by)s, %(stored)s, %(calculated)s, %(algorithm)s, %(valid)s, %(error)s)
RETURNING id
"""


def check_doc_id(doc_id: str) -> str:
    """Accept the document ids the schema accepts: a letter or digit, then up to 127 of `A-Za-z0-9_.:-`."""
    if not isinstance(doc_id, str) or not _DOC_ID.match(doc_id):
        raise ValidationError(
            "doc_id", f"{doc_id!r} is not a document id (letters, digits, _ . : -; max 128)"
        )
    return doc_id


def signer_address(email: str) -> str:
    """A signer's address in the stored form: validated, normalised, lower case."""
    return normalise_address("email", email).lower()


def _document(row: dict[str, Any]) -> Document:
    return Document(**row)


def get_document(conn: psycopg.Connection[Any], doc_id: str, *, lock: bool = False) -> Document:
    """Read one document (locking its row until the caller's transaction ends when `lock`)."""
    check_doc_id(doc_id)
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(LOCK_DOCUMENT if lock else SELECT_DOCUMENT, (doc_id,)).fetchone()
    if row is None:
        raise DocumentNotFound(doc_id)
    return _document(row)


def file_checksum(path: Path, algorithm: str, progress: Callable[[int], None] | None = None) -> str:
    """Hex digest of a file, read in 1 MiB chunks; `progress` gets the bytes read so far."""
    if algorithm not in ALGORITHMS:
        raise ValidationError("algorithm", f"must be one of {', '.join(ALGORITHMS)}")
    digest = hashlib.new(ALGORITHMS[algorithm])
    done = 0
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done)
    except OSError as exc:
        raise ValidationError("file", f"cannot read {path}: {exc.strerror or exc}") from None
    return digest.hexdigest()


def add_document(
    conn: psycopg.Connection[Any],
    doc_id: str,
    *,
    title: str = "",
    url: str = "",
    checksum: str | None = None,
    checksum_algorithm: str | None = None,
    description: str = "",
    created_by: str = "",
    require_login: bool = False,
) -> Document:
    """Store a new document; an existing id, a malformed URL or checksum is a `ValidationError`.

    `require_login`: its signing page takes a signature only after an OpenID Connect login whose
    verified email is the signer's (the link alone is not enough)."""
    check_doc_id(doc_id)
    check_header_text("title", title)  # the title becomes part of a reminder's subject
    if len(title) > 200:
        raise ValidationError("title", "longer than 200 characters")
    if url and not _URL.match(url):
        raise ValidationError("url", f"{url!r} is not an http(s) URL")
    if checksum is not None:
        checksum = checksum.strip().lower()
        checksum_algorithm = checksum_algorithm or "SHA-256"
        if checksum_algorithm not in _HEX:
            raise ValidationError("algorithm", f"must be one of {', '.join(ALGORITHMS)}")
        if not _HEX[checksum_algorithm].match(checksum):
            raise ValidationError("checksum", f"not a hex {checksum_algorithm} digest")
    elif checksum_algorithm is not None:
        raise ValidationError("algorithm", "an algorithm needs a checksum")
    params = {
        "doc_id": doc_id,
        "title": title,
        "url": url,
        "checksum": checksum,
        "algorithm": checksum_algorithm,
        "description": description,
        "created_by": created_by,
        "require_login": require_login,
    }
    with conn.cursor(row_factory=tuple_row) as cur:
        if cur.execute(INSERT_DOCUMENT, params).fetchone() is None:
            raise ValidationError("doc_id", f"document {doc_id!r} already exists")
    return get_document(conn, doc_id)


def expect_signer(
    conn: psycopg.Connection[Any],
    doc_id: str,
    email: str,
    *,
    name: str = "",
    locale: str | None = None,
    added_by: str = "",
    notes: str | None = None,
    settings: Settings | None = None,
) -> bool:
    """Add an expected signer (or update their name and locale); True when the signer is new.

    The locale must be one the reminder template can be rendered in (a language falls back to
    its base language, then to the default locale), so a reminder never fails for it later.
    """
    settings = settings or Settings.from_env()
    get_document(conn, doc_id)
    address = signer_address(email)
    check_header_text("name", name)  # the name becomes the reminder's To display name
    if len(name) > 255:
        raise ValidationError("name", "longer than 255 characters")
    locale = locale or settings.default_locale
    load_catalog(conn, settings).resolve(REMINDER_TEMPLATE, locale)
    params = {
        "doc_id": doc_id,
        "email": address,
        "name": name,
        "locale": locale,
        "added_by": added_by,
        "notes": notes,
    }
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(UPSERT_SIGNER, params).fetchone()
    assert row is not None
    return bool(row["inserted"])


def verify_checksum(
    conn: psycopg.Connection[Any],
    doc_id: str,
    path: Path,
    *,
    verified_by: str = "",
    progress: Callable[[int], None] | None = None,
) -> ChecksumResult:
    """Hash `path` with the document's algorithm and record whether it matches the stored checksum.

    A document without a stored checksum is hashed with SHA-256 and recorded as not valid, with
    the reason. An unreadable file is a `ValidationError` and records nothing.
    """
    document = get_document(conn, doc_id)
    algorithm = document.checksum_algorithm or "SHA-256"
    calculated = file_checksum(path, algorithm, progress)
    stored = document.checksum
    error: str | None = None
    if stored is None:
        error = "the document has no stored checksum to compare with"
    elif stored != calculated:
        error = f"{algorithm} mismatch: stored {stored}, file {calculated}"
    params = {
        "doc_id": doc_id,
        "verified_by": verified_by,
        "stored": stored,
        "calculated": calculated,
        "algorithm": algorithm,
        "valid": error is None,
        "error": error,
    }
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(INSERT_VERIFICATION, params).fetchone()
    assert row is not None
    return ChecksumResult(
        id=int(row[0]),
        doc_id=doc_id,
        algorithm=algorithm,
        stored_checksum=stored,
        calculated_checksum=calculated,
        is_valid=error is None,
        error_message=error,
    )
