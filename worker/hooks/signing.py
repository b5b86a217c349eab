"""Standard Webhooks signatures (https://www.standardwebhooks.com): what a receiver verifies with that
specification's libraries in any language.

The secret is `whsec_` and 32 random bytes in base64; each POST carries `webhook-id` (the event's
stable id, the same on every retry), `webhook-timestamp` (seconds since the epoch, at this attempt)
and `webhook-signature: v1,<base64 of HMAC-SHA256 over "id.timestamp.body">`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

PREFIX = "whsec_"


def new_secret() -> str:
    """A fresh signing secret, as the specification writes one."""
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def secret_bytes(secret: str) -> bytes:
    """The key inside a `whsec_` secret."""
    if not secret.startswith(PREFIX):
        raise ValueError("a webhook secret starts with whsec_")
    return base64.b64decode(secret[len(PREFIX) :], validate=True)


def signature(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value of `body` sent as `message_id` at `timestamp`."""
    signed = message_id.encode("ascii") + b"." + str(timestamp).encode("ascii") + b"." + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def headers(key: bytes, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of a signed POST, with its content type."""
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(key, message_id, timestamp, body),
    }
