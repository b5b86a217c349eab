"""A Google service account's JSON key, as a Gmail API sender account stores it: read, checked, named.

The key file Google's console hands out is a JSON object with (among others) `type`
("service_account"), `client_email`, `private_key_id`, `private_key` (an RSA key in PEM) and
`token_uri` (where the JWT bearer grant is asked). What is checked here is what the worker needs: a
key that would only fail at the first send is refused when it is added. `token_uri` must be https
(plain http to the loopback interface only, for a local test or a sidecar): the signed assertion
never crosses a network in clear, and the file cannot point the worker at anything else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from worker.core.sender_settings import check_token_url
from worker.core.validation import ValidationError, normalise_address

# A key file is about 2.3 KiB; anything much bigger is not one.
MAX_KEY_BYTES = 64 * 1024
GMAIL_SEND_SCOPE = "https://www.googleapis.com/auth/gmail.send"


@dataclass(frozen=True)
class ServiceAccountKey:
    """The parts of a service account key the JWT bearer grant needs (the private key never printed)."""

    client_email: str
    private_key_id: str
    private_key: str = field(repr=False)
    token_uri: str


def parse_service_account_key(text: str) -> ServiceAccountKey:
    """The key in a service account key file's text; `ValidationError` saying what is wrong otherwise."""
    if len(text.encode("utf-8", "replace")) > MAX_KEY_BYTES:
        raise ValidationError("service_account", "is too big for a service account key file")
    try:
        data: Any = json.loads(text)
    except ValueError:
        raise ValidationError(
            "service_account", "is not JSON (give the key file Google's console made)"
        ) from None
    if not isinstance(data, dict) or data.get("type") != "service_account":
        raise ValidationError("service_account", 'is not a service account key ("type": "service_account")')
    values = {name: data.get(name) for name in ("client_email", "private_key_id", "private_key", "token_uri")}
    for name, value in values.items():
        if not isinstance(value, str) or not value.strip():
            raise ValidationError("service_account", f"has no {name}")
    client_email = normalise_address("service_account", str(values["client_email"]))
    try:
        token_uri = check_token_url(str(values["token_uri"]))
    except ValidationError:
        raise ValidationError(
            "service_account", "token_uri must be an https:// URL (plain http:// only to 127.0.0.1)"
        ) from None
    private_key = str(values["private_key"])
    _check_rsa_key(private_key)
    key_id = str(values["private_key_id"])
    if not key_id.isascii() or not key_id.isprintable() or len(key_id) > 200:
        raise ValidationError("service_account", "private_key_id must be printable ASCII")
    return ServiceAccountKey(client_email, key_id, private_key, token_uri)


def _check_rsa_key(pem: str) -> None:
    """RS256 signs with an RSA private key: refuse anything else now, not at the first send."""
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem.encode("ascii"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError):
        raise ValidationError(
            "service_account", "private_key is not an unencrypted PEM private key"
        ) from None
    if not isinstance(key, RSAPrivateKey):
        raise ValidationError("service_account", "private_key is not an RSA key (RS256 needs one)")
