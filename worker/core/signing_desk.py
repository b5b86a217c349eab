"""What the signing page and the signatures domain say to each other: link states, views, proofs, outcomes.

The public HTTP server (`worker.tracking.signing`) serves the page; the signatures domain
(`worker.producers.documents.signing_desk`) checks links and records signatures. The two rooms
do not import each other, so the command line hands the server an object that satisfies
`SigningDesk`, and both sides speak in the types below.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol


class LinkState(StrEnum):
    """What a signer's link is worth now."""

    VALID = "valid"  # authentic, current, unexpired, not signed yet: the page may sign
    SIGNED = "signed"  # authentic, and this signer signed already (used up)
    EXPIRED = "expired"  # authentic but past its expiry
    SUPERSEDED = "superseded"  # authentic, made for a checksum the document no longer has
    INVALID = "invalid"  # malformed, altered, unknown, or its signer is no longer expected


@dataclass(frozen=True)
class SignatureReceipt:
    """What a signer is told about their signature: its id, time and payload hash."""

    id: int
    signed_at: datetime
    payload_hash: str


@dataclass(frozen=True)
class LinkView:
    """What the page may show for a link; everything but `state` is empty for an invalid link."""

    state: LinkState
    doc_id: str = ""
    title: str = ""
    url: str = ""
    description: str = ""
    checksum: str | None = None
    checksum_algorithm: str | None = None
    signer_email: str = ""
    signer_name: str = ""
    locale: str | None = None
    require_login: bool = False
    expires_at: datetime | None = None
    signature: SignatureReceipt | None = None


INVALID_LINK = LinkView(LinkState.INVALID)


@dataclass(frozen=True)
class Proof:
    """How a signature on the page was proven, and where it came from (kept with the signature)."""

    user_sub: str
    referer: str | None
    ip_address: str | None
    user_agent: str | None


@dataclass(frozen=True)
class SignOutcome:
    """The result of a POST: signed now (`receipt` set) or refused with the link's state."""

    view: LinkView
    receipt: SignatureReceipt | None = None
    receipt_email_id: int | None = None

    @property
    def signed_now(self) -> bool:
        """True when this request recorded the signature."""
        return self.receipt is not None


class SigningDesk(Protocol):
    """The signatures domain as the signing page sees it; its methods block (run them in a thread)."""

    def view(self, token: str) -> LinkView:
        """What the link is worth now and what to show; changes nothing."""
        ...

    def sign(self, token: str, proof: Proof) -> SignOutcome:
        """Sign for the link's signer if the link is valid now, and queue the receipt email."""
        ...

    def allow(self, client: str) -> bool:
        """Take one request from `client`'s rate budget; False when it is spent."""
        ...
