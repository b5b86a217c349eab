"""User accounts (reference 01): create, list, find, suspend, unsuspend, resend activation, request recovery."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors
from psycopg.rows import dict_row, tuple_row

from worker.core.config import Settings
from worker.core.results import ActionResult
from worker.core.validation import ValidationError, check_header_text, normalise_address

log = logging.getLogger(__name__)

STATUSES = ("provisioned", "active", "suspended")
JOB_NAME = "lifecycle_mailer"
_LOCALE = re.compile(r"^[a-z]{2}(-[A-Z]{2})?$")
_HEX_SECRET = re.compile(r"^[0-9a-fA-F]{64}$")
_CODE = re.compile(r"^[0-9]{5}$")


class TokenError(ValidationError):
    """A token cannot be consumed (unknown, expired, already used, another account's, wrong account state)."""

    def __init__(self, message: str) -> None:
        super().__init__("token", message)


@dataclass(frozen=True)
class Account:
    """One account as the CLI and the console show it."""

    id: int
    email: str
    login: str
    status: str
    locale: str
    created_at: datetime
    status_changed_at: datetime | None
    activated_at: datetime | None
    suspended_at: datetime | None
    unsuspended_at: datetime | None


@dataclass(frozen=True)
class ConsumedToken:
    """What consuming a token did."""

    token_id: int
    account_id: int
    action: str
    account_status: str


# ---------------------------------------------------------------------------
# Accounts
# ---------------------------------------------------------------------------

SET_TTL = "SELECT set_config('mailroom.token_ttl', %s, true)"

INSERT_ACCOUNT = """
INSERT INTO mailroom.accounts (email, login, locale) VALUES (%(email)s, %(login)s, %(locale)s)
RETURNING id
"""

SELECT_ACCOUNTS = """
SELECT id, email, login, status, locale, created_at, status_changed_at, activated_at, suspended_at,
       unsuspended_at
FROM mailroom.accounts
WHERE (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY id
LIMIT %(limit)s
"""

# A login may look like an address: the account whose email it is wins over one whose login it is.
FIND_ACCOUNT = """
SELECT id FROM mailroom.accounts WHERE email = %(email)s OR login = %(who)s
ORDER BY email = %(email)s DESC NULLS LAST, id LIMIT 1
"""

SUSPEND = """
UPDATE mailroom.accounts SET status = 'suspended'
WHERE id = ANY(%s) AND status <> 'suspended'
RETURNING id
"""

# The status trigger turns 'active' back into 'provisioned' for an account that was never activated.
UNSUSPEND = """
UPDATE mailroom.accounts SET status = 'active'
WHERE id = ANY(%s) AND status = 'suspended'
RETURNING id
"""

NEW_ACTIVATION_TOKENS = """
INSERT INTO mailroom.tokens (account_id, action, expires_at)
SELECT id, 'activation', now() + mailroom.token_ttl()
FROM mailroom.accounts WHERE id = ANY(%s) AND status = 'provisioned'
RETURNING account_id
"""

ACCOUNT_STATUS_OF = "SELECT id, status FROM mailroom.accounts WHERE id = ANY(%s)"

INSERT_RECOVERY = """
INSERT INTO mailroom.tokens (account_id, action, expires_at)
VALUES (%s, 'password_recovery', now() + mailroom.token_ttl())
RETURNING id
"""


def _ttl(settings: Settings) -> str:
    return f"{settings.token_ttl_seconds} seconds"


def _set_ttl(conn: psycopg.Connection[Any], settings: Settings) -> None:
    conn.execute(SET_TTL, (_ttl(settings),))


@contextmanager
def _atomic(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The caller's transaction; on an autocommit connection, one of our own around the block.

    (`conn.transaction()` alone would commit the caller's transaction when none was open yet.)
    """
    if conn.autocommit:
        with conn.transaction():
            yield
    else:
        yield


def create_account(
    conn: psycopg.Connection[Any], email: str, login: str, *, locale: str = "en", settings: Settings
) -> int:
    """Create a provisioned account (and, by trigger, its activation token) in the caller's transaction."""
    address = normalise_address("email", email)
    login = login.strip()
    if not 1 <= len(login) <= 254:
        raise ValidationError("login", "must be 1 to 254 characters")
    check_header_text("login", login)
    if not _LOCALE.match(locale):
        raise ValidationError("locale", f"{locale!r} is not a locale like 'en' or 'fr-CA'")
    with _atomic(conn), conn.cursor(row_factory=tuple_row) as cur:
        _set_ttl(conn, settings)  # opens the caller's transaction, so the block below is a savepoint
        try:
            with conn.transaction():
                row = cur.execute(
                    INSERT_ACCOUNT, {"email": address, "login": login, "locale": locale}
                ).fetchone()
        except errors.UniqueViolation as exc:
            taken = "email" if "email" in (exc.diag.constraint_name or "") else "login"
            raise ValidationError(taken, "an account with this " + taken + " already exists") from None
    assert row is not None
    return int(row[0])


def list_accounts(
    conn: psycopg.Connection[Any], status: str | None = None, limit: int = 1000
) -> list[Account]:
    """Accounts in id order, optionally only those in one status."""
    if status is not None and status not in STATUSES:
        raise ValidationError("status", f"must be one of {', '.join(STATUSES)}")
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(SELECT_ACCOUNTS, {"status": status, "limit": limit}).fetchall()
    return [Account(**row) for row in rows]


def find_account(conn: psycopg.Connection[Any], who: str) -> int:
    """The id of the account with this email address or login (the email first); a clear error when none."""
    who = who.strip()
    try:
        email: str | None = normalise_address("email", who) if "@" in who else None
    except ValidationError:
        email = None
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(FIND_ACCOUNT, {"who": who, "email": email}).fetchone()
    if row is None:
        raise ValidationError("account", f"no account with email or login {who!r}")
    return int(row[0])


def _statuses(conn: psycopg.Connection[Any], ids: Sequence[int]) -> dict[int, str]:
    with conn.cursor(row_factory=tuple_row) as cur:
        return {int(r[0]): str(r[1]) for r in cur.execute(ACCOUNT_STATUS_OF, (list(ids),)).fetchall()}


def _account_action(
    conn: psycopg.Connection[Any], statement: str, account_ids: Sequence[int]
) -> ActionResult:
    wanted = sorted(set(account_ids))
    with conn.cursor(row_factory=tuple_row) as cur:
        changed = sorted({int(r[0]) for r in cur.execute(statement, (wanted,)).fetchall()})
    rest = [i for i in wanted if i not in set(changed)]
    statuses = _statuses(conn, rest) if rest else {}
    skipped = {i: (f"is {statuses[i]}" if i in statuses else "no such account") for i in rest}
    return ActionResult(changed=changed, skipped=skipped)


def suspend_accounts(conn: psycopg.Connection[Any], account_ids: Sequence[int]) -> ActionResult:
    """Suspend accounts (provisioned or active); already suspended ones are left alone."""
    return _account_action(conn, SUSPEND, account_ids)


def unsuspend_accounts(conn: psycopg.Connection[Any], account_ids: Sequence[int]) -> ActionResult:
    """Lift a suspension: back to active, or to provisioned for an account that was never activated."""
    return _account_action(conn, UNSUSPEND, account_ids)


def resend_activation(
    conn: psycopg.Connection[Any], account_ids: Sequence[int], settings: Settings | None = None
) -> ActionResult:
    """Issue a fresh activation token to each provisioned account (the mailer job mails it)."""
    with _atomic(conn):
        _set_ttl(conn, settings or Settings.from_env())
        return _account_action(conn, NEW_ACTIVATION_TOKENS, account_ids)


def request_recovery(conn: psycopg.Connection[Any], account_id: int, settings: Settings) -> int:
    """Issue a password-recovery token for an active account; return the token's id."""
    status = _statuses(conn, [account_id]).get(account_id)
    if status is None:
        raise ValidationError("account", f"no account {account_id}")
    if status != "active":
        raise ValidationError("account", f"account {account_id} is {status}: only active accounts recover")
    with _atomic(conn), conn.cursor(row_factory=tuple_row) as cur:
        _set_ttl(conn, settings)
        row = cur.execute(INSERT_RECOVERY, (account_id,)).fetchone()
    assert row is not None
    return int(row[0])
