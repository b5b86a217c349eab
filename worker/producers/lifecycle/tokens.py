"""Consuming activation and recovery tokens: by secret or by code, attempts counted, refusals with the reason."""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.validation import normalise_address
from worker.producers.lifecycle.accounts import _CODE, _HEX_SECRET, ConsumedToken, TokenError

log = logging.getLogger(__name__)


# Found by the SHA-256 of the secret: the plain secret is not kept once the token was mailed.
SELECT_BY_HASH = """
SELECT t.id, t.action, t.account_id, t.expires_at, t.consumed_at, t.failed_attempts,
       t.failed_attempts >= mailroom.token_max_attempts() AS locked, a.status, a.email
FROM mailroom.tokens t JOIN mailroom.accounts a ON a.id = t.account_id
WHERE t.secret_hash = %(hash)s
FOR UPDATE OF t, a
"""
# All the account's tokens (for the action), each with whether the code matches: the comparison is made
# in SQL over every one of them, so the code never comes back and the work does not depend on a match.
# An unknown address and a wrong code give the same answer.
TOKENS_BY_CODE = """
SELECT t.id, t.action, t.account_id, t.expires_at, t.consumed_at, t.failed_attempts,
       t.failed_attempts >= mailroom.token_max_attempts() AS locked, a.status, a.email,
       t.code = %(code)s AS matches
FROM mailroom.tokens t JOIN mailroom.accounts a ON a.id = t.account_id
WHERE a.email = %(email)s AND (%(action)s::text IS NULL OR t.action = %(action)s)
ORDER BY t.id DESC
FOR UPDATE OF t, a
"""
COUNT_WRONG_CODE = """
UPDATE mailroom.tokens SET failed_attempts = failed_attempts + 1 WHERE id = ANY(%s)
RETURNING failed_attempts >= mailroom.token_max_attempts() AS locked
"""
CONSUME = "UPDATE mailroom.tokens SET consumed_at = %(now)s WHERE id = %(id)s AND consumed_at IS NULL"
STATUS_AFTER = "SELECT status FROM mailroom.accounts WHERE id = %s"
MAX_ATTEMPTS = "SELECT mailroom.token_max_attempts() AS n"

# What each action needs the account to be when its token is consumed (and when it is mailed).
_NEEDS = {"activation": "provisioned", "password_recovery": "active"}


def consume_token(
    conn: psycopg.Connection[Any],
    *,
    secret: bytes | str | None = None,
    code: str | None = None,
    email: str | None = None,
    action: str | None = None,
    now: datetime | None = None,
) -> ConsumedToken:
    """Consume a token by its secret (bytes or 64 hex digits) or by its 5-digit code and account email.

    With `email`, a secret of another account's token is refused; with `action`, a token for another
    action is. Consuming an activation token activates the account (a trigger does it). Every refusal is
    a `TokenError` and changes nothing, except that a wrong code is counted against each usable token of
    the account: after `mailroom.token_max_attempts()` (5) wrong codes a token is locked, and neither its
    code nor its link works any more. `now` (default: the clock) decides expiry.

    The outcome is committed before this returns or raises (a refusal the caller rolled back would leave
    a wrong code uncounted), so it must not be called inside another transaction: on a connection that is
    not in autocommit mode, commit or roll back first.
    """
    if not conn.autocommit and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("consume_token commits its outcome: call it outside any open transaction")
    now = now or datetime.now(UTC)
    address = normalise_address("email", email) if email is not None else None
    if secret is not None:
        if isinstance(secret, str):
            if not _HEX_SECRET.match(secret.strip()):
                raise TokenError("a secret is 64 hexadecimal digits")
            secret = bytes.fromhex(secret.strip())
        digest = hashlib.sha256(secret).digest()
    elif code is not None and address is not None:
        if not _CODE.match(code.strip()):
            raise TokenError("a code is 5 digits")
    else:
        raise TokenError("give the token's secret, or its code and the account's email")
    # Returned, not raised, inside the block: the block commits what it did (a counted wrong code) first.
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        if secret is not None:
            row = cur.execute(SELECT_BY_HASH, {"hash": digest}).fetchone()
            outcome = _by_secret(row, address, action, now)
        else:
            assert code is not None
            assert address is not None
            rows = cur.execute(
                TOKENS_BY_CODE, {"email": address, "code": code.strip(), "action": action}
            ).fetchall()
            outcome = _by_code(cur, rows, address, now)
        if isinstance(outcome, dict):
            cur.execute(CONSUME, {"id": outcome["id"], "now": now})
            after = cur.execute(STATUS_AFTER, (outcome["account_id"],)).fetchone()
    if isinstance(outcome, TokenError):
        raise outcome
    assert after is not None
    return ConsumedToken(
        int(outcome["id"]), int(outcome["account_id"]), str(outcome["action"]), str(after["status"])
    )


def _refusal(row: dict[str, Any], now: datetime) -> TokenError | None:
    """Why this token cannot be consumed now, or None."""
    if row["consumed_at"] is not None:
        return TokenError(f"this token was already used at {_stamp(row['consumed_at'])}")
    if row["expires_at"] <= now:
        return TokenError(f"this token expired at {_stamp(row['expires_at'])}; ask for a new one")
    if row["locked"]:
        return TokenError(
            f"this token was locked after {row['failed_attempts']} wrong codes; ask for a new one"
        )
    needed = _NEEDS[row["action"]]
    if row["status"] != needed:
        return TokenError(f"the account is {row['status']}; a {row['action']} token needs it {needed}")
    return None


def _by_secret(
    row: dict[str, Any] | None, address: str | None, action: str | None, now: datetime
) -> dict[str, Any] | TokenError:
    if row is None:
        return TokenError("no such token")
    if address is not None and row["email"] != address:
        return TokenError("this token belongs to another account")
    if action is not None and row["action"] != action:
        return TokenError(f"this is a {row['action']} token, not a {action} token")
    return _refusal(row, now) or row


def _by_code(
    cur: psycopg.Cursor[dict[str, Any]], rows: list[dict[str, Any]], address: str, now: datetime
) -> dict[str, Any] | TokenError:
    usable = [r for r in rows if r["consumed_at"] is None and r["expires_at"] > now and not r["locked"]]
    right = next((r for r in usable if r["matches"]), None)
    if right is not None:
        return _refusal(right, now) or right  # the account may be in the wrong state
    # A wrong code counts against every usable token of the account, whatever else it matched.
    locked_now = False
    if usable:
        cur.execute(COUNT_WRONG_CODE, ([r["id"] for r in usable],))
        locked_now = any(r["locked"] for r in cur.fetchall())
    old = next((r for r in rows if r["matches"]), None)
    if old is not None:
        return _refusal(old, now) or TokenError("this token can no longer be used")
    if locked_now or any(r["locked"] and r["consumed_at"] is None and r["expires_at"] > now for r in rows):
        limit = cur.execute(MAX_ATTEMPTS).fetchone()
        attempts = limit["n"] if limit else "too many"
        return TokenError(f"this token was locked after {attempts} wrong codes; ask for a new one")
    return TokenError(f"no token with this code for {address}")


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
