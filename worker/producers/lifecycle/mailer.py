"""The mailer job: each new token becomes one email in the transaction that records it; the worker's producer."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

from worker.core.config import Settings
from worker.core.masking import mask_address
from worker.engine.producer import Producer
from worker.producers.lifecycle.accounts import JOB_NAME
from worker.producers.lifecycle.tokens import _NEEDS, _stamp

# Enqueueing (templates, links, content rules) is loaded with the first email this producer makes: a
# round that finds nothing to do, what most rounds find, starts without it.
if TYPE_CHECKING:
    from worker.core.outbox import EmailRequest

log = logging.getLogger(__name__)


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
    from worker.core.outbox import EmailRequest

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
                from worker.core.outbox import enqueue_async
                from worker.core.validation import ValidationError

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
