"""DKIM: sign each message's final bytes with a sender account's key (dkimpy), and check keys before they are stored.

The signed header list is explicit: dkimpy's default set omits `List-Unsubscribe-Post`, and a
receiver only honours RFC 8058 one-click unsubscribe when both List-Unsubscribe headers are
covered by a valid signature. Headers in the list that a message lacks are signed as absent, and
the ones that matter are signed once more than they occur, so nobody can add a copy on the way
without breaking the signature.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, replace

import dkim as dkimpy
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from worker.message import Envelope
from worker.validation import ValidationError

_SIGNED = ("date", "message-id", "reply-to", "mime-version", "content-type")
# Listed twice: one more time than a message carries them, so a second copy cannot be added in transit.
_OVERSIGNED = ("from", "to", "subject", "list-unsubscribe", "list-unsubscribe-post")
SIGNED_HEADERS = (*_OVERSIGNED, *_SIGNED, *_OVERSIGNED)
MIN_KEY_BITS = 1024
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DOMAIN = re.compile(rf"^(?:{_LABEL}\.)+[A-Za-z]{{2,63}}$")
_SELECTOR = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")


class DkimError(ValueError):
    """A message could not be signed."""


@dataclass(frozen=True)
class DkimKey:
    """One sender account's signing identity: d=, s= and the RSA private key (PKCS#1 PEM)."""

    domain: str
    selector: str
    private_key: bytes

    def sign(self, message: bytes) -> bytes:
        """Return the message with its DKIM-Signature header prepended (relaxed/relaxed, rsa-sha256)."""
        try:
            header = dkimpy.sign(
                message,
                self.selector.encode("ascii"),
                self.domain.encode("ascii"),
                self.private_key,
                canonicalize=(b"relaxed", b"relaxed"),
                include_headers=[h.encode("ascii") for h in SIGNED_HEADERS],
            )
        except dkimpy.DKIMException as exc:
            raise DkimError(f"DKIM signing failed: {exc}") from exc
        return bytes(header) + message


def sign_envelope(envelope: Envelope, key: DkimKey) -> Envelope:
    """The same envelope with signed content."""
    return replace(envelope, content=key.sign(envelope.content))


def check_identity(domain: str, selector: str) -> tuple[str, str]:
    """Validate a DKIM domain (d=) and selector (s=); return them lower-cased."""
    if not _DOMAIN.match(domain) or len(domain) > 253:
        raise ValidationError("dkim_domain", f"{domain!r} is not a domain name")
    if not _SELECTOR.match(selector) or len(selector) > 63:
        raise ValidationError("dkim_selector", f"{selector!r} is not a DKIM selector (letters, digits, -, .)")
    return domain.lower(), selector.lower()


def normalise_private_key(pem: bytes) -> bytes:
    """Load an RSA private key in PEM (PKCS#1 or PKCS#8, unencrypted) and return it as PKCS#1 PEM for dkimpy."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValidationError("dkim_key", f"not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValidationError("dkim_key", "only RSA keys are supported (rsa-sha256)")
    if key.key_size < MIN_KEY_BITS:
        raise ValidationError("dkim_key", f"a {key.key_size}-bit key is too short; use 2048 bits")
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def dns_record(private_key: bytes) -> str:
    """The TXT record to publish at `<selector>._domainkey.<domain>` for this key."""
    key = serialization.load_pem_private_key(private_key, password=None)
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"v=DKIM1; k=rsa; p={base64.b64encode(public).decode('ascii')}"
