"""What a signature covers and how one stored signature is checked: canonical payloads (versions 1 and 2) and links.

Version 2 (every new signature) covers every field shown to people as part of a signature: the document
and its checksum, the signer's address and name, the signing time, the nonce, the link to the previous
signature and the signature's position in the chain. Version 1 (signatures made before) covers all of
these but the name and the position, and is still checked by its own rules.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from worker.core.validation import ValidationError
from worker.producers.documents.records import Document
from worker.producers.documents.signing_key import SigningKey

PAYLOAD_VERSION = 2
KNOWN_VERSIONS = (1, 2)


def utc_text(moment: datetime) -> str:
    """A time as signed: UTC, to the microsecond, with a Z."""
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
    signer_name: str | None = None,
    seq: int | None = None,
    version: int = PAYLOAD_VERSION,
) -> str:
    """The exact text a signature covers: sorted-key compact JSON, UTF-8, times in UTC to the microsecond.

    `key` is the signing key's fingerprint, so a signature made with another key is named as such.
    Version 2 adds the signer's name and the position (`seq`) in the document's chain; version 1 has neither.
    """
    fields: dict[str, Any] = {
        "v": version,
        "key": key,
        "doc_id": doc_id,
        "checksum": checksum,
        "checksum_algorithm": checksum_algorithm,
        "signer": signer_email,
        "signed_at": utc_text(signed_at),
        "nonce": nonce,
        "prev_hash": prev_hash,
    }
    if version == 2:
        if seq is None or seq < 1:
            raise ValueError("a version 2 payload needs the signature's position (seq >= 1)")
        fields["signer_name"] = signer_name
        fields["seq"] = seq
    elif version != 1:
        raise ValueError(f"unknown payload version {version!r}")
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str) -> str:
    """SHA-256 of UTF-8 text, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def link_hash(payload_hash: str, signature: str) -> str:
    """What the next signature's `prev_hash` must be: it commits to this signature's payload and bytes.

    The database computes the same (`mailroom.signature_link_hash`) for the chain head.
    """
    return sha256_hex(f"{payload_hash}:{signature}")


def _rebuilt(fields: dict[str, Any]) -> str | None:
    """The canonical text of the fields a payload claims, in the version it claims; None when it cannot be."""
    version = fields.get("v")
    if version not in KNOWN_VERSIONS:
        return None
    try:
        return canonical_payload(
            doc_id=fields["doc_id"],
            checksum=fields["checksum"],
            checksum_algorithm=fields["checksum_algorithm"],
            signer_email=fields["signer"],
            signed_at=datetime.fromisoformat(fields["signed_at"]),
            nonce=fields["nonce"],
            prev_hash=fields["prev_hash"],
            key=fields["key"],
            signer_name=fields.get("signer_name"),
            seq=fields.get("seq"),
            version=version,
        )
    except (KeyError, TypeError, ValueError):
        return None


def _parsed(payload: str, problems: list[str]) -> dict[str, Any]:
    try:
        fields = json.loads(payload)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        problems.append("payload is not a JSON object")
        return {}
    if fields.get("v") not in KNOWN_VERSIONS:
        problems.append(f"payload version {fields.get('v')!r} is unknown")
    elif _rebuilt(fields) != payload:
        problems.append("payload is not in canonical form")
    return fields


def _stored_fields(row: dict[str, Any], version: Any) -> dict[str, Any]:
    """The stored columns a payload of `version` covers, under their payload names."""
    stored: dict[str, Any] = {
        "doc_id": row["doc_id"],
        "signer": row["signer_email"],
        "signed_at": utc_text(row["signed_at"]),
        "nonce": row["nonce"],
        "prev_hash": row["prev_hash"],
    }
    if version == 2:
        stored["signer_name"] = row["signer_name"]
        stored["seq"] = row["seq"]
    return stored


def row_problems(
    row: dict[str, Any], document: Document, expected_prev: str | None, key: SigningKey
) -> list[str]:
    """Everything wrong with one stored signature: its payload, hash, Ed25519 signature, stored fields and link."""
    problems: list[str] = []
    payload: str = row["payload"]
    fields = _parsed(payload, problems)
    for name, value in _stored_fields(row, fields.get("v")).items():
        if name not in fields:
            if fields and fields.get("v") == 2:
                problems.append(f"payload has no {name}")
        elif fields[name] != value:
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
