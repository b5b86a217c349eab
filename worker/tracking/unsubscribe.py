"""Whom an unsubscribe link names, and putting that one address on the unsubscribe list.

A link is `/u/<token>` for an email with one recipient, and `/u/<token>.<mac>` for each recipient of
an email with several (`worker.core.recipient_tokens`): each copy carries its own, so one recipient
can unsubscribe only themselves. The plain token of an email with several recipients names nobody,
and a MAC that fits none of the email's addresses names nobody either; the answer is then the same
"not valid" page as for a token that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from worker.core.recipient_tokens import parse_unsubscribe_token, unsubscribe_names

# The email an unsubscribe token belongs to, with every address it went to: a queued one, or one
# retention has archived and deleted (its recipient then comes from its send log, kept
# MAILROOM_LOG_RETENTION_MONTHS; only an email with one recipient keeps its token when archived).
# Transactional email has no token that counts.
FIND_TARGET = """
(SELECT id, campaign_id,
        ARRAY[recipient_email] || coalesce(to_extra, '{}') || coalesce(cc, '{}') || coalesce(bcc, '{}')
 FROM mailroom.email_queue WHERE unsubscribe_token = %(token)s AND NOT transactional)
UNION ALL
(SELECT s.email_id, s.campaign_id, ARRAY[s.recipient_email]
 FROM mailroom.archived_emails a
 CROSS JOIN LATERAL (
     SELECT email_id, recipient_email, campaign_id FROM mailroom.send_logs
     WHERE email_id = a.email_id AND outcome = 'sent' ORDER BY attempted_at DESC LIMIT 1
 ) s
 WHERE a.unsubscribe_token = %(token)s)
LIMIT 1
"""

IS_UNSUBSCRIBED = "SELECT EXISTS (SELECT 1 FROM mailroom.unsubscribe_list WHERE email = %s)"

# This transaction's commit waits for the disk and a synchronous standby, whatever the connection's level.
DURABLE_COMMIT = "SET LOCAL synchronous_commit = on"

# Immediate and idempotent: the address is on the list when this statement commits.
UNSUBSCRIBE = """
INSERT INTO mailroom.unsubscribe_list (email, reason, source, campaign_id, email_id, user_agent, ip_address)
VALUES (%(email)s, %(reason)s, %(source)s, %(campaign)s, %(email_id)s, %(ua)s, %(ip)s::inet)
ON CONFLICT (email) DO NOTHING
"""


@dataclass(frozen=True)
class Target:
    """The one recipient an unsubscribe link names."""

    email_id: int
    campaign_id: str | None
    address: str  # as the email was addressed (the list holds it lower-cased)


async def find_target(conn: psycopg.AsyncConnection[Any], token: str, key: bytes | None) -> Target | None:
    """The recipient the link's token names, or None (malformed, unknown, or naming nobody)."""
    parsed = parse_unsubscribe_token(token)
    if parsed is None:
        return None
    email_token, mac = parsed
    row = await (await conn.execute(FIND_TARGET, {"token": email_token})).fetchone()
    if row is None:
        return None
    email_id, campaign_id, addresses = row
    distinct = list(dict.fromkeys(str(a).lower() for a in addresses))
    if mac is None:
        # The plain token names the recipient only where there is exactly one.
        return Target(email_id, campaign_id, str(addresses[0])) if len(distinct) == 1 else None
    if key is None:
        return None
    named = next((a for a in distinct if unsubscribe_names(email_token, mac, a, key)), None)
    return Target(email_id, campaign_id, named) if named is not None else None


async def is_unsubscribed(conn: psycopg.AsyncConnection[Any], target: Target) -> bool:
    """Whether the target's address is on the unsubscribe list already."""
    row = await (await conn.execute(IS_UNSUBSCRIBED, (target.address.lower(),))).fetchone()
    return bool(row and row[0])


async def unsubscribe(
    conn: psycopg.AsyncConnection[Any],
    target: Target,
    *,
    source: str,
    reason: str,
    ip: str | None,
    user_agent: str | None,
) -> None:
    """Put the target's address (and only it) on the unsubscribe list, durably: the tracker's
    connections commit asynchronously (an open or a click lost to a crash costs nothing), but a
    person told "unsubscribed" must never be mailed again because the primary crashed a moment later
    or failed over to a standby that had not yet received the row. This transaction waits as
    `synchronous_commit = on` says: flushed here, and on a synchronous standby where there is one."""
    params = {
        "email": target.address.lower(),
        "reason": reason,
        "source": source,
        "campaign": target.campaign_id,
        "email_id": target.email_id,
        "ua": user_agent,
        "ip": ip,
    }
    async with conn.transaction():
        await conn.execute(DURABLE_COMMIT)
        await conn.execute(UNSUBSCRIBE, params)
