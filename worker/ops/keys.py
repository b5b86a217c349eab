"""Key rotation: every stored secret re-encrypted from the current secret key to a new one, in one transaction.

The secrets are the sender accounts' SMTP passwords, DKIM private keys, OAuth2 client secrets and
refresh tokens, Gmail API service account keys, and webhook endpoints' signing secrets. Either every one of
them decrypts with the current key and all are re-encrypted, with one audit row (`keys.rotate`),
or nothing changes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from worker.core.config import ConfigError
from worker.core.crypto import SecretBox
from worker.ops import audit

SECRETS = """
SELECT id, name, smtp_password_encrypted, dkim_private_key_encrypted,
       oauth_client_secret_encrypted, oauth_refresh_token_encrypted, gmail_key_encrypted
FROM mailroom.sender_accounts
WHERE smtp_password_encrypted IS NOT NULL OR dkim_private_key_encrypted IS NOT NULL
   OR oauth_client_secret_encrypted IS NOT NULL OR oauth_refresh_token_encrypted IS NOT NULL
   OR gmail_key_encrypted IS NOT NULL
ORDER BY id
"""

# Taken first: an account added or given a secret during the rotation would be left on the old key, so
# writers wait (a moment: the rotation is one pass) until it commits; readers go on.
LOCK_NEW_ACCOUNTS = "LOCK TABLE mailroom.sender_accounts IN SHARE ROW EXCLUSIVE MODE"

# Webhook endpoints' signing secrets, under the same lock discipline.
LOCK_NEW_ENDPOINTS = "LOCK TABLE mailroom.webhook_endpoints IN SHARE ROW EXCLUSIVE MODE"
ENDPOINT_SECRETS = "SELECT id, secret_encrypted FROM mailroom.webhook_endpoints ORDER BY id"
SET_ENDPOINT_SECRET = "UPDATE mailroom.webhook_endpoints SET secret_encrypted = %s WHERE id = %s"  # noqa: S105

SET_SECRETS = """
UPDATE mailroom.sender_accounts
SET smtp_password_encrypted = %s, dkim_private_key_encrypted = %s,
    oauth_client_secret_encrypted = %s, oauth_refresh_token_encrypted = %s, gmail_key_encrypted = %s
WHERE id = %s
"""


class KeyMismatch(ConfigError):
    """Some stored secret does not decrypt with the current key: nothing was re-encrypted."""


@dataclass(frozen=True)
class Rotation:
    """What a rotation re-encrypted."""

    accounts: int
    passwords: int
    dkim_keys: int
    key_id: str
    oauth_secrets: int = 0  # OAuth2 client secrets and refresh tokens
    gmail_keys: int = 0  # Gmail API service account keys
    webhook_secrets: int = 0  # webhook endpoints' signing secrets

    @property
    def secrets(self) -> int:
        """Every secret re-encrypted."""
        return self.passwords + self.dkim_keys + self.oauth_secrets + self.gmail_keys + self.webhook_secrets


def key_id(key: str) -> str:
    """A short public name for a key (the start of its SHA-256): tells keys apart without showing one."""
    return hashlib.sha256(key.strip().encode("ascii", "replace")).hexdigest()[:12]


def rotate_secrets(
    conn: psycopg.Connection[Any], old: SecretBox, new: SecretBox, new_key: str, *, actor: str | None = None
) -> Rotation:
    """Re-encrypt every stored secret from `old` to `new` (whose text is `new_key`) and audit it.

    Raises `KeyMismatch`, having changed nothing, when any secret does not decrypt with `old`.
    Runs in `conn`'s transaction: the caller commits (or rolls back) the whole rotation.
    """
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(LOCK_NEW_ACCOUNTS)
        cur.execute(LOCK_NEW_ENDPOINTS)
        rows = cur.execute(SECRETS).fetchall()
        updates, failures = _reencrypt(rows, old, new)
        hooks, hook_failures = _reencrypt_endpoints(cur.execute(ENDPOINT_SECRETS).fetchall(), old, new)
        failures += hook_failures
        if failures:
            shown = ", ".join(failures[:10]) + (
                f" and {len(failures) - 10} more" if len(failures) > 10 else ""
            )
            raise KeyMismatch(
                f"{len(failures)} stored secret(s) do not decrypt with the current MAILROOM_SECRET_KEY "
                f"({shown}); nothing was re-encrypted"
            )
        cur.executemany(SET_SECRETS, updates)
        cur.executemany(SET_ENDPOINT_SECRET, hooks)
    rotation = Rotation(
        accounts=len(updates),
        passwords=sum(1 for u in updates if u[0] is not None),
        dkim_keys=sum(1 for u in updates if u[1] is not None),
        key_id=key_id(new_key),
        oauth_secrets=sum((u[2] is not None) + (u[3] is not None) for u in updates),
        gmail_keys=sum(1 for u in updates if u[4] is not None),
        webhook_secrets=len(hooks),
    )
    detail = {
        "accounts": rotation.accounts,
        "passwords": rotation.passwords,
        "dkim_keys": rotation.dkim_keys,
        "oauth_secrets": rotation.oauth_secrets,
        "gmail_keys": rotation.gmail_keys,
        "webhook_secrets": rotation.webhook_secrets,
        "new_key_id": rotation.key_id,
    }
    audit.record(conn, "keys.rotate", actor or audit.cli_actor(), "sender_accounts", rotation.secrets, detail)
    return rotation


def _reencrypt(
    rows: list[tuple[Any, ...]], old: SecretBox, new: SecretBox
) -> tuple[list[tuple[Any, ...]], list[str]]:
    """Each account's secrets under the new key (then its id), and which secrets the old key cannot read."""
    updates: list[tuple[Any, ...]] = []
    failures: list[str] = []
    for sender_id, name, *tokens in rows:
        fresh: list[bytes | None] = []
        for token, what in zip(tokens, _KINDS, strict=True):
            if token is None:
                fresh.append(None)
                continue
            try:
                fresh.append(new.encrypt(old.decrypt(bytes(token))))
            except ConfigError:
                failures.append(f"sender account {name}: {what}")
                fresh.append(None)
        updates.append((*fresh, int(sender_id)))
    return updates, failures


def _reencrypt_endpoints(
    rows: list[tuple[Any, ...]], old: SecretBox, new: SecretBox
) -> tuple[list[tuple[bytes, int]], list[str]]:
    """Each webhook endpoint's secret under the new key (then its id), and which the old key cannot read."""
    updates: list[tuple[bytes, int]] = []
    failures: list[str] = []
    for endpoint, token in rows:
        try:
            updates.append((new.encrypt(old.decrypt(bytes(token))), int(endpoint)))
        except ConfigError:
            failures.append(f"webhook endpoint {endpoint}: signing secret")
    return updates, failures


_KINDS = ("password", "DKIM key", "OAuth2 client secret", "OAuth2 refresh token", "Gmail service account key")


def unreadable_secrets(conn: psycopg.Connection[Any], box: SecretBox) -> tuple[int, list[str]]:
    """How many secrets are stored, and which of them `box` cannot decrypt (a restore drill asks this)."""
    with conn.cursor(row_factory=tuple_row) as cur:
        accounts = cur.execute(SECRETS).fetchall()
        endpoints = cur.execute(ENDPOINT_SECRETS).fetchall()
    _, failures = _reencrypt(accounts, box, box)
    _, hook_failures = _reencrypt_endpoints(endpoints, box, box)
    stored = sum(token is not None for _, _, *tokens in accounts for token in tokens) + len(endpoints)
    return stored, failures + hook_failures
