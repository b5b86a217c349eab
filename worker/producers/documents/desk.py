"""The signatures domain behind the signing page: check a signer's link, sign for it, queue the receipt.

`DocumentDesk` satisfies `worker.core.signing_desk.SigningDesk`; the command line hands one to the
public HTTP server, which runs its (blocking) methods in a thread. A signature made here is made by
`sign_document`, the code behind `mailroom docs sign` (payload version 2, the chain head, one per
signer), with the identity the signer proved and where the request came from, and the receipt email
is enqueued in the same transaction: both happen, or neither.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg

from worker.core.config import Settings
from worker.core.db import connection_kwargs
from worker.core.masking import mask_address
from worker.core.outbox import EmailRequest, enqueue
from worker.core.rate_limit import RateLimiter
from worker.core.signing_desk import LinkState, LinkView, Proof, SignatureReceipt, SignOutcome
from worker.core.validation import ValidationError
from worker.producers.documents.chain import utc_text
from worker.producers.documents.records import get_document
from worker.producers.documents.signatures import sign_document
from worker.producers.documents.signing_links import check_link, optional_link_key

log = logging.getLogger("mailroom.signing")

RECEIPT_TEMPLATE = "signature_receipt"
REFERENCE_TYPE = "signature"
LINK_PROOF = "email:"  # the prefix of the identity a signer's link proves


def _now() -> datetime:
    return datetime.now(UTC)


class DocumentDesk:
    """Signing-page requests against one database; each call opens (and closes) its own connection."""

    def __init__(
        self,
        url: str,
        settings: Settings,
        *,
        clock: Callable[[], datetime] = _now,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.url = url
        self.settings = settings
        self.clock = clock
        self.key = optional_link_key(settings)
        # A person reads, maybe reloads, then signs: 20 requests at once and one every two seconds
        # is far more than that, and far less than guessing (which the MAC makes hopeless anyway).
        self.limiter = limiter or RateLimiter(per_minute=30, burst=20)
        if self.key is None:
            log.warning("signing links are refused: MAILROOM_SECRET_KEY is not set")

    def _connect(self) -> psycopg.Connection[Any]:
        # A transaction of our own: signing and its receipt commit together (a signature is synchronous).
        return psycopg.connect(self.url, **{**connection_kwargs(self.settings), "autocommit": False})

    def allow(self, client: str) -> bool:
        """Take one request from `client`'s budget (per IPv4 address or IPv6 /64)."""
        return self.limiter.allow(client)

    def view(self, token: str) -> LinkView:
        """What the link is worth now; reads only."""
        with self._connect() as conn:
            found = check_link(conn, self.key, token, self.clock())
            conn.rollback()
        return found

    def sign(self, token: str, proof: Proof) -> SignOutcome:
        """Sign for the link's signer when the link is valid now; the receipt email in the same transaction."""
        with self._connect() as conn:
            found = check_link(conn, self.key, token, self.clock())
            if found.state is not LinkState.VALID:
                return SignOutcome(found)
            # The document first (as sign_document locks it), then the link again: a checksum changed
            # or a signature made since the first look is seen now, and nobody changes them until commit.
            get_document(conn, found.doc_id, lock=True)
            found = check_link(conn, self.key, token, self.clock(), lock=True)
            if found.state is not LinkState.VALID:
                return SignOutcome(found)
            if found.require_login and proof.user_sub.startswith(LINK_PROOF):
                log.warning(
                    "refused a link-only signature of %s: the document requires a login", found.doc_id
                )
                return SignOutcome(found)
            try:
                signature = sign_document(
                    conn, found.doc_id, found.signer_email, settings=self.settings, proof=proof
                )
            except ValidationError as exc:  # signed by another way a moment ago, or a value the checks refuse
                conn.rollback()
                log.warning("signature of %s not recorded: %s", found.doc_id, exc)
                return SignOutcome(self.view(token))
            receipt = SignatureReceipt(signature.id, signature.signed_at, signature.payload_hash)
            email_id = self._queue_receipt(conn, found, receipt)
            conn.commit()
        log.info("%s signed %s on the signing page", mask_address(found.signer_email), found.doc_id)
        return SignOutcome(found, receipt, email_id)

    def _queue_receipt(self, conn: psycopg.Connection[Any], view: LinkView, receipt: SignatureReceipt) -> int:
        request = EmailRequest(
            to=view.signer_email,
            to_name=view.signer_name or None,
            template=RECEIPT_TEMPLATE,
            locale=view.locale,
            data={
                "name": view.signer_name or view.signer_email,
                "title": view.title,
                "doc_id": view.doc_id,
                "signature_id": receipt.id,
                "signed_at": utc_text(receipt.signed_at),
                "payload_hash": receipt.payload_hash,
                "checksum": view.checksum or "",
                "checksum_algorithm": view.checksum_algorithm or "",
            },
            idempotency_key=f"{RECEIPT_TEMPLATE}:{receipt.id}",
            reference_type=REFERENCE_TYPE,
            reference_id=str(receipt.id),
        )
        return enqueue(conn, request, settings=self.settings)


def signing_desk(url: str, settings: Settings) -> DocumentDesk:
    """The desk the public HTTP server signs through."""
    return DocumentDesk(url, settings)
