"""User lifecycle (reference 01): accounts, activation and password-recovery tokens, and the mailer job.

Status transitions and their timestamps are enforced by triggers (revision 0001); creating a provisioned
account creates its activation token in the same transaction. The mailer job turns each new token into one
email inside the transaction that records it as mailed, under the lock of its cursor row, so any number of
workers may run it and no token is mailed twice or skipped.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import errors
from psycopg.rows import dict_row, tuple_row

from worker.core.config import Settings
from worker.core.masking import mask_address
from worker.core.outbox import EmailRequest, enqueue_async
from worker.core.results import ActionResult
from worker.core.validation import ValidationError, check_header_text, normalise_address
from worker.engine.producer import Producer

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


# ---------------------------------------------------------------------------
# Consuming tokens
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# The mailer job
# ---------------------------------------------------------------------------

# The cursor row's lock serialises every mailer: the second one waits here until the first commits and
# then sees its tokens as mailed. Selection is by "not yet handled", not by `id > last_seq` (see 0002).
LOCK_CURSOR = "SELECT last_seq FROM mailroom.jobs WHERE name = %s FOR UPDATE"

PENDING_TOKENS = """
SELECT t.id, t.action, t.secret, t.code, t.expires_at, t.consumed_at,
       t.failed_attempts >= mailroom.token_max_attempts() AS locked, a.id AS account_id, a.email, a.login, a.locale, a.status
FROM mailroom.tokens t JOIN mailroom.accounts a ON a.id = t.account_id
WHERE t.mailed_at IS NULL AND t.mail_skipped_reason IS NULL
ORDER BY t.id
LIMIT %s
"""

MARK_MAILED = """
UPDATE mailroom.tokens t SET mailed_at = %(now)s, email_id = m.email_id, secret = NULL
FROM unnest(%(ids)s::bigint[], %(emails)s::bigint[]) AS m(id, email_id)
WHERE t.id = m.id
"""

MARK_SKIPPED = """
UPDATE mailroom.tokens t SET mail_skipped_reason = m.reason, secret = NULL
FROM unnest(%(ids)s::bigint[], %(reasons)s::text[]) AS m(id, reason)
WHERE t.id = m.id
"""

ADVANCE_CURSOR = """
UPDATE mailroom.jobs SET last_seq = greatest(last_seq, %(seq)s), last_run_at = now() WHERE name = %(name)s
"""

_PATHS = {"activation": "activate", "password_recovery": "recover"}


@dataclass(frozen=True)
class MailerPass:
    """What one pass of the mailer job did."""

    mailed: dict[int, int]  # token id -> email id
    skipped: dict[int, str]  # token id -> why it was not mailed

    @property
    def handled(self) -> int:
        """Tokens this pass took off the to-do list."""
        return len(self.mailed) + len(self.skipped)


def _skip_reason(row: dict[str, Any], now: datetime) -> str | None:
    if row["consumed_at"] is not None:
        return "already consumed"
    if row["expires_at"] <= now:
        return "expired before it was mailed"
    if row["locked"]:
        return "locked after too many wrong codes"
    needed = _NEEDS[row["action"]]
    if row["status"] != needed:
        return f"account is {row['status']}, not {needed}"
    return None


def token_email(row: dict[str, Any], settings: Settings) -> EmailRequest:
    """The email for one token: its template, code, expiry and a link built from the base URL."""
    base = settings.lifecycle_base_url or settings.base_url
    link = f"{base}/{_PATHS[row['action']]}?token={bytes(row['secret']).hex()}"
    return EmailRequest(
        to=row["email"],
        template=row["action"],
        locale=row["locale"],
        data={
            "login": row["login"],
            "code": row["code"],
            "link": link,
            "expires_at": _stamp(row["expires_at"]),
        },
        idempotency_key=f"token:{row['id']}",
        transactional=True,
        reference_type="token",
        reference_id=str(row["id"]),
        priority=100,
    )


async def mail_tokens(
    conn: psycopg.AsyncConnection[Any],
    settings: Settings,
    *,
    now: datetime | None = None,
    limit: int = 200,
) -> MailerPass:
    """Mail up to `limit` new tokens in one transaction that also records them and advances the cursor.

    Expired, consumed or locked tokens, and tokens whose account is not in the state their action needs (an
    activation for a provisioned account, a recovery for an active one), are marked skipped with the reason.
    The mailer is the one reader of a token's plain secret: it builds the link from it and forgets it in the
    same transaction (mailed or skipped alike); the token is found later by the secret's SHA-256.
    """
    now = now or datetime.now(UTC)
    mailed: dict[int, int] = {}
    skipped: dict[int, str] = {}
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(LOCK_CURSOR, (JOB_NAME,))
        if await cur.fetchone() is None:
            raise RuntimeError(f"the {JOB_NAME} cursor row is missing from mailroom.jobs")
        await cur.execute(PENDING_TOKENS, (limit,))
        rows = await cur.fetchall()
        for row in rows:
            reason = _skip_reason(row, now)
            if reason is None:
                try:
                    mailed[row["id"]] = await enqueue_async(
                        conn, token_email(row, settings), settings=settings, created_by=JOB_NAME
                    )
                except ValidationError as exc:
                    reason = f"cannot be mailed: {exc}"
            if reason is not None:
                skipped[row["id"]] = reason
                log.info("token %s for %s not mailed: %s", row["id"], mask_address(row["email"]), reason)
        if mailed:
            await cur.execute(MARK_MAILED, {"now": now, "ids": list(mailed), "emails": list(mailed.values())})
        if skipped:
            await cur.execute(MARK_SKIPPED, {"ids": list(skipped), "reasons": list(skipped.values())})
        if rows:
            await cur.execute(ADVANCE_CURSOR, {"seq": max(r["id"] for r in rows), "name": JOB_NAME})
    return MailerPass(mailed=mailed, skipped=skipped)


# --- the producer inside `mailroom worker` ---------------------------------------------


async def run_once(conn: psycopg.AsyncConnection[Any], settings: Settings) -> int:
    """Mail one batch of new tokens; return how many tokens were handled (mailed or skipped)."""
    return (await mail_tokens(conn, settings)).handled


PRODUCER = Producer("lifecycle", run_once, channels=("mailroom_tokens",), interval_seconds=60.0)
