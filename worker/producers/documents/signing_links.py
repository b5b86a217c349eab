"""A link per expected signer to the signing page: `MAILROOM_BASE_URL/s/<token>`.

The token is `<signer>.<expires>.<checksum tag>.<mac>`: the expected signer's row id and the expiry
(Unix seconds) in base 36, 8 base32 characters of the SHA-256 of the document's checksum at the time
the link was made, and an HMAC-SHA256 (130 bits kept) over all of them and the document id and the
signer's address, keyed by a key derived from `MAILROOM_SECRET_KEY` with a context of its own (so no
other Mailroom token is ever valid as a signing link). Changing any character breaks the MAC, and a
link names one signer of one document: it cannot be turned into another signer's or another
document's. A link whose MAC holds but whose checksum tag is not the document's current one was made
for an earlier file: it is superseded, and the signer needs a new link. Lower case only, so a mail
client that changes the case of a URL breaks nothing it could fix.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.config import ConfigError, Settings
from worker.core.return_path import b32_prefix, base36, bounce_key, keyed_digest, optional_bounce_key
from worker.core.signing_desk import INVALID_LINK, LinkState, LinkView, SignatureReceipt

PATH_PREFIX = "/s/"
_CONTEXT = b"mailroom signing link v1"
_TAG_CHARS = 8
_MAC_CHARS = 26  # 130 bits
# Bounded repetitions only: the token comes from anyone's browser. Matched whole (fullmatch): a `$`
# would also match before a final newline, and `/s/TOKEN%0A` would be the link.
_TOKEN = re.compile(r"([0-9a-z]{1,13})\.([0-9a-z]{1,10})\.([a-z2-7]{8})\.([a-z2-7]{26})")
MAX_TOKEN = 64


def link_key(settings: Settings) -> bytes:
    """The signing-link key: derived from the secret key (a `ConfigError` when none is configured)."""
    try:
        return keyed_digest(bounce_key(settings), _CONTEXT)
    except ConfigError:
        raise ConfigError("MAILROOM_SECRET_KEY is not set: signing links are signed with it") from None


def optional_link_key(settings: Settings) -> bytes | None:
    """The signing-link key, or None where no secret key is configured (then no link is authentic)."""
    key = optional_bounce_key(settings)
    return None if key is None else keyed_digest(key, _CONTEXT)


def checksum_tag(checksum: str | None) -> str:
    """8 base32 characters naming the document's checksum (a document without one has a tag too)."""
    return b32_prefix(hashlib.sha256((checksum or "").encode("ascii")).digest(), _TAG_CHARS)


def _mac(key: bytes, signer_id: str, expires: str, tag: str, doc_id: str, email: str) -> str:
    body = "\0".join(("signing-link", signer_id, expires, tag, doc_id, email.lower()))
    return b32_prefix(keyed_digest(key, body.encode("utf-8")), _MAC_CHARS)


def make_token(
    key: bytes, signer_id: int, doc_id: str, email: str, checksum: str | None, expires_at: datetime
) -> str:
    """The token of one expected signer's link, valid until `expires_at` and for this checksum only."""
    sid, expires = base36(signer_id), base36(int(expires_at.timestamp()))
    tag = checksum_tag(checksum)
    return f"{sid}.{expires}.{tag}.{_mac(key, sid, expires, tag, doc_id, email)}"


@dataclass(frozen=True)
class ParsedToken:
    """The parts of a well-formed token, not yet authenticated."""

    signer_id: int
    expires_at: datetime
    tag: str
    mac: str
    raw_id: str
    raw_expires: str


def parse_token(token: str) -> ParsedToken | None:
    """The parts of a well-formed token; None for anything else (never raises)."""
    if len(token) > MAX_TOKEN:
        return None
    match = _TOKEN.fullmatch(token)
    if match is None:
        return None
    signer_id, expires = int(match.group(1), 36), int(match.group(2), 36)
    if not 0 < signer_id < 2**63 or expires > 253402300799:  # bigint ids; year 9999
        return None
    at = datetime.fromtimestamp(expires, UTC)
    return ParsedToken(signer_id, at, match.group(3), match.group(4), match.group(1), match.group(2))


def authentic(key: bytes, parsed: ParsedToken, doc_id: str, email: str) -> bool:
    """Whether the token's MAC was made with this key for this signer of this document (constant time)."""
    expected = _mac(key, parsed.raw_id, parsed.raw_expires, parsed.tag, doc_id, email)
    return hmac.compare_digest(expected, parsed.mac)


def signing_url(settings: Settings, token: str) -> str:
    """The page a link opens: `MAILROOM_BASE_URL/s/<token>`."""
    return settings.base_url.rstrip("/") + PATH_PREFIX + token


def expiry(settings: Settings, now: datetime | None = None) -> datetime:
    """When a link made now expires (`MAILROOM_SIGNING_LINK_DAYS`)."""
    return (now or datetime.now(UTC)) + timedelta(days=settings.signing_link_days)


# The signer a token names, with the document and the signature if there is one.
SELECT_SIGNER = """
SELECT e.id, e.doc_id, e.email, e.name, e.locale, d.title, d.url, d.description, d.checksum,
       d.checksum_algorithm, d.require_login, s.id AS signature_id, s.signed_at, s.payload_hash
FROM mailroom.expected_signers e
JOIN mailroom.documents d ON d.doc_id = e.doc_id
LEFT JOIN mailroom.signatures s ON s.doc_id = e.doc_id AND s.signer_email = e.email
WHERE e.id = %s
"""


def _state(row: dict[str, Any], parsed: ParsedToken, now: datetime) -> LinkState:
    # A signer who signed is told so whatever became of the link since: that is what they need to know.
    if row["signature_id"] is not None:
        return LinkState.SIGNED
    if not hmac.compare_digest(parsed.tag, checksum_tag(row["checksum"])):
        return LinkState.SUPERSEDED
    if parsed.expires_at <= now:
        return LinkState.EXPIRED
    return LinkState.VALID


def check_link(
    conn: psycopg.Connection[Any],
    key: bytes | None,
    token: str,
    now: datetime | None = None,
    *,
    lock: bool = False,
) -> LinkView:
    """What a token is worth now, read in the caller's transaction (`lock`: the signer's row too).

    Every token that is not authentic gets the same answer whether or not its signer id exists,
    so the page never tells whether an address is a signer.
    """
    parsed = parse_token(token)
    if parsed is None or key is None:
        return INVALID_LINK
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            SELECT_SIGNER + (" FOR UPDATE OF e" if lock else ""), (parsed.signer_id,)
        ).fetchone()
    if row is None or not authentic(key, parsed, row["doc_id"], row["email"]):
        return INVALID_LINK
    receipt = None
    if row["signature_id"] is not None:
        receipt = SignatureReceipt(int(row["signature_id"]), row["signed_at"], row["payload_hash"])
    return LinkView(
        state=_state(row, parsed, now or datetime.now(UTC)),
        doc_id=row["doc_id"],
        title=row["title"] or row["doc_id"],
        url=row["url"],
        description=row["description"],
        checksum=row["checksum"],
        checksum_algorithm=row["checksum_algorithm"],
        signer_email=row["email"],
        signer_name=row["name"],
        locale=row["locale"],
        require_login=bool(row["require_login"]),
        expires_at=parsed.expires_at,
        signature=receipt,
    )


@dataclass(frozen=True)
class SignerLink:
    """One expected signer's link, for `mailroom docs links`."""

    email: str
    name: str
    url: str
    expires_at: datetime
    signed_at: datetime | None


SELECT_SIGNERS = """
SELECT e.id, e.email, e.name, d.checksum, s.signed_at
FROM mailroom.expected_signers e
JOIN mailroom.documents d ON d.doc_id = e.doc_id
LEFT JOIN mailroom.signatures s ON s.doc_id = e.doc_id AND s.signer_email = e.email
WHERE e.doc_id = %s
ORDER BY e.id
"""


def link_for(settings: Settings, signer_id: int, doc_id: str, email: str, checksum: str | None,
             now: datetime | None = None) -> str:  # fmt: skip
    """The URL of one expected signer's link, made now (a `ConfigError` without a secret key)."""
    token = make_token(link_key(settings), signer_id, doc_id, email, checksum, expiry(settings, now))
    return signing_url(settings, token)


def signer_links(
    conn: psycopg.Connection[Any], doc_id: str, settings: Settings, now: datetime | None = None
) -> list[SignerLink]:
    """A fresh link for every expected signer of `doc_id` (a `DocumentNotFound` for an unknown id)."""
    from worker.producers.documents.records import get_document

    get_document(conn, doc_id)
    key, expires = link_key(settings), expiry(settings, now)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(SELECT_SIGNERS, (doc_id,)).fetchall()
    return [
        SignerLink(
            email=row["email"],
            name=row["name"],
            url=signing_url(
                settings, make_token(key, row["id"], doc_id, row["email"], row["checksum"], expires)
            ),
            expires_at=expires,
            signed_at=row["signed_at"],
        )
        for row in rows
    ]
