"""The suppression list as operators manage it: list, an address's history, add, lift, all audited.

The lists themselves are `mailroom.bounce_list` (hard, soft, complaint and an operator's `manual`)
and `mailroom.unsubscribe_list`; `mailroom.suppressions` shows both and `mailroom.suppression_events`
holds every address's history (written by triggers, whatever door a change came through). The
commands here say who and why in transaction settings the triggers read. CSV export and import are
in `worker.ops.suppression_csv`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row

from worker.core.masking import mask_address, mask_addresses_in
from worker.core.validation import ValidationError, check_header_text, normalise_address
from worker.ops import audit

KINDS = ("hard", "soft", "complaint", "unsubscribe", "manual")
MAX_REASON = 500

# Newest first. The search is a plain substring of the address or the reason (ILIKE with the
# pattern's own wildcards escaped by the caller).
LIST = """
SELECT s.address, s.kind, s.stops, s.reason, s.status, s.times, s.since, s.last_at, a.name AS sender, s.campaign_id
FROM mailroom.suppressions s
LEFT JOIN mailroom.sender_accounts a ON a.id = s.sender_account_id
WHERE (%(kind)s::text IS NULL OR s.kind = %(kind)s)
  AND (%(pattern)s::text IS NULL OR s.address ILIKE %(pattern)s OR s.reason ILIKE %(pattern)s)
ORDER BY s.last_at DESC, s.address
LIMIT %(limit)s
"""

HISTORY = """
SELECT e.id, e.occurred_at, e.address, e.kind, e.change, e.source, e.status, e.reason, e.email_id,
       e.bounce_event_id, a.name AS sender, e.campaign_id, e.actor
FROM mailroom.suppression_events e
LEFT JOIN mailroom.sender_accounts a ON a.id = e.sender_account_id
WHERE e.address = %(address)s
ORDER BY e.occurred_at DESC, e.id DESC
LIMIT %(limit)s
"""

# What the triggers on the lists record as source, actor and reason for this transaction's changes.
NOTE = (
    "SELECT set_config('mailroom.suppression_source', %(source)s, true),"
    " set_config('mailroom.suppression_actor', %(actor)s, true),"
    " set_config('mailroom.suppression_reason', %(reason)s, true)"
)

# Locked: a report or an unsubscribe arriving meanwhile waits, so the audit row says what was lifted.
LISTED_BOUNCE = "SELECT bounce_type FROM mailroom.bounce_list WHERE email = %(address)s FOR UPDATE"
LISTED_UNSUBSCRIBE = (
    "SELECT 'unsubscribe' FROM mailroom.unsubscribe_list WHERE email = %(address)s FOR UPDATE"
)

# An operator's suppression stops everything; it takes the place of a soft listing (a hold only) and
# leaves a hard bounce, a complaint or an earlier manual one as it is.
ADD_MANUAL = """
INSERT INTO mailroom.bounce_list (email, bounce_type, reason)
VALUES (%(address)s, 'manual', %(reason)s)
ON CONFLICT (email) DO UPDATE
SET bounce_type = 'manual', reason = EXCLUDED.reason, last_bounced_at = now(),
    bounce_count = mailroom.bounce_list.bounce_count + 1
WHERE mailroom.bounce_list.bounce_type = 'soft'
RETURNING email
"""

LIFT_BOUNCE = "DELETE FROM mailroom.bounce_list WHERE email = %(address)s RETURNING bounce_type"
LIFT_UNSUBSCRIBE = "DELETE FROM mailroom.unsubscribe_list WHERE email = %(address)s RETURNING email"

COMPLAINT_WARNING = (
    "the recipient reported this address's email as spam: mailing it again risks more complaints, and "
    "mailbox providers (Gmail, Yahoo: 0.3%) block senders whose complaint rate is too high; lift it only "
    "when the recipient asked to be mailed again (--force)"
)


class SuppressionError(Exception):
    """An operator's change that was refused, with the sentence that says why."""


@dataclass(frozen=True)
class Lifted:
    """What a lift took off the lists: the kinds, empty when the address was on none."""

    address: str
    kinds: tuple[str, ...]


def normalise(address: str) -> str:
    """The address as the lists hold it: validated, trimmed, the domain in ASCII (IDNA), all lowercased."""
    return normalise_address("address", address).lower()


def check_reason(reason: str) -> str:
    """An operator's reason: required, one line of at most MAX_REASON characters."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError("reason", "a reason is required: it goes into the history and the audit log")
    check_header_text("reason", reason)  # no control characters or line breaks: it is shown in terminals
    if len(reason) > MAX_REASON:
        raise ValidationError("reason", f"at most {MAX_REASON} characters")
    return reason


def search_pattern(text: str | None) -> str | None:
    """An ILIKE pattern matching `text` anywhere, its own % _ and \\ taken literally."""
    if not text:
        return None
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def list_suppressions(
    conn: psycopg.Connection[Any], *, kind: str | None = None, search: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """The suppressed addresses, most recently listed first; of one kind, or matching `search`."""
    params = {"kind": kind, "pattern": search_pattern(search), "limit": limit}
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(LIST, params, prepare=False).fetchall()


def history(conn: psycopg.Connection[Any], address: str, *, limit: int = 200) -> list[dict[str, Any]]:
    """Every event of one address (given in any case or form), newest first."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(HISTORY, {"address": normalise(address), "limit": limit}).fetchall()


def note(conn: psycopg.Connection[Any], source: str, actor: str, reason: str | None) -> None:
    """Tell the lists' triggers who changes them and why, for the rest of this transaction."""
    conn.execute(NOTE, {"source": source, "actor": actor, "reason": reason or ""})


def add(conn: psycopg.Connection[Any], address: str, reason: str, actor: str) -> bool:
    """Suppress `address` by hand (all email, transactional too); False when it already was.

    Runs in `conn`'s transaction with its audit row (`suppression.add`); the caller commits.
    """
    address, reason = normalise(address), check_reason(reason)
    note(conn, "operator", actor, reason)
    added = conn.execute(ADD_MANUAL, {"address": address, "reason": reason}).fetchone() is not None
    if added:
        # Masked: the audit trail is append-only, and a privacy erasure must not leave the address there.
        detail = {"kind": "manual", "reason": mask_addresses_in(reason)}
        audit.record(conn, "suppression.add", actor, mask_address(address), 1, detail)
    return added


def remove(
    conn: psycopg.Connection[Any], address: str, reason: str, actor: str, *, force: bool = False
) -> Lifted:
    """Lift every suppression of `address`: email to it is sent again (email already suppressed stays so).

    A complaint is lifted only with `force` (SuppressionError otherwise, nothing changed). Runs in
    `conn`'s transaction with its audit row (`suppression.remove`); the caller commits.
    """
    address, reason = normalise(address), check_reason(reason)
    with conn.cursor(row_factory=tuple_row) as cur:
        listed = [str(k) for (k,) in cur.execute(LISTED_BOUNCE, {"address": address}).fetchall()]
        listed += [str(k) for (k,) in cur.execute(LISTED_UNSUBSCRIBE, {"address": address}).fetchall()]
        if not listed:
            return Lifted(address, ())
        if "complaint" in listed and not force:
            raise SuppressionError(f"{address} complained: {COMPLAINT_WARNING}")
        note(conn, "operator", actor, reason)
        cur.execute(LIFT_BOUNCE, {"address": address})
        cur.execute(LIFT_UNSUBSCRIBE, {"address": address})
    detail = {"kinds": listed, "reason": mask_addresses_in(reason), "forced": force and "complaint" in listed}
    audit.record(conn, "suppression.remove", actor, mask_address(address), len(listed), detail)
    return Lifted(address, tuple(listed))
