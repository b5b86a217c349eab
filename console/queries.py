"""The console's read models: every refresh query, bounded, keyed by an injected `now`.

Each query reads an active set through a partial index (pending, assigned, failed, suppressed
email; pending events) or a recent time range of the partitioned send log, never all of history,
and every list is limited or paged by key, so a refresh costs the same at 100 rows or 10,000,000.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import dict_row

from console.figures import Count, Rates, last_hour, queue_counts
from worker.core.failover import database_unavailable, server_read_only
from worker.core.reputation import DEFAULT_WINDOW, REPUTATION

Row = dict[str, Any]

PAGE_SIZE = 100

# --- Overview -------------------------------------------------------------------------------

# Opens, clicks and unsubscribes in each of the last 24 hours (bins end at `now`). The event tables
# are partitioned by month: the time range prunes them to this month's partition (and last month's
# on the first day); the unsubscribe list is read through its unsubscribed_at index.
TRACKING_PER_HOUR = """
SELECT 'opens' AS kind, date_bin('1 hour', occurred_at, %(now)s::timestamptz) AS hour, count(*) AS n
FROM mailroom.open_events
WHERE occurred_at >= %(now)s::timestamptz - interval '24 hours' AND occurred_at < %(now)s
GROUP BY 2
UNION ALL
SELECT 'clicks', date_bin('1 hour', occurred_at, %(now)s::timestamptz), count(*)
FROM mailroom.click_events
WHERE occurred_at >= %(now)s::timestamptz - interval '24 hours' AND occurred_at < %(now)s
GROUP BY 2
UNION ALL
SELECT 'unsubscribes', date_bin('1 hour', unsubscribed_at, %(now)s::timestamptz), count(*)
FROM mailroom.unsubscribe_list
WHERE unsubscribed_at >= %(now)s::timestamptz - interval '24 hours' AND unsubscribed_at < %(now)s
GROUP BY 2
"""

TRACKING_KINDS = ("opens", "clicks", "unsubscribes")

SENDERS = """
SELECT s.id, s.name,
       CASE WHEN s.circuit_state <> 'closed' AND s.status IN ('active', 'warming_up') THEN 'unreachable'
            ELSE s.status END AS status,
       CASE WHEN s.circuit_state <> 'closed' AND s.status IN ('active', 'warming_up')
            THEN s.circuit_reason ELSE s.status_reason END AS status_reason,
       s.daily_limit, s.warmup_stage, s.warmup_limit, s.last_used_at, s.send_delay_ms, s.batch_size,
       CASE WHEN s.warmup_stage > 0 THEN least(s.daily_limit, s.warmup_limit) ELSE s.daily_limit END
           AS effective_limit,
       coalesce(u.sent, 0) AS sent_today, coalesce(u.bounces, 0) AS bounces_today,
       coalesce(u.errors, 0) AS errors_today,
       array_to_string(s.streams, ', ') AS streams,
       array_to_string(mailroom.sender_from_domains(s.from_domains, s.from_email), ', ') AS from_domains
FROM mailroom.sender_accounts s
LEFT JOIN mailroom.sender_usage u
       ON u.sender_account_id = s.id AND u.day = (%(now)s::timestamptz AT TIME ZONE 'UTC')::date
ORDER BY s.name
LIMIT 200
"""

DOCUMENTS = """
SELECT d.doc_id, d.title, e.expected, coalesce(s.signed, 0) AS signed
FROM mailroom.documents d
CROSS JOIN LATERAL (SELECT count(*) AS expected FROM mailroom.expected_signers x WHERE x.doc_id = d.doc_id) e
LEFT JOIN LATERAL (
    SELECT count(*) AS signed
    FROM mailroom.signatures g
    JOIN mailroom.expected_signers x ON x.doc_id = g.doc_id AND x.email = g.signer_email
    WHERE g.doc_id = d.doc_id
) s ON true
WHERE (%(pattern)s::text IS NULL OR d.doc_id ILIKE %(pattern)s OR d.title ILIKE %(pattern)s)
ORDER BY (e.expected - coalesce(s.signed, 0)) > 0 DESC, d.created_at DESC, d.doc_id
LIMIT %(limit)s
"""

MISSING_SIGNERS = """
SELECT x.email, x.name,
       (SELECT max(r.requested_at) FROM mailroom.reminder_logs r
         WHERE r.doc_id = x.doc_id AND r.recipient_email = x.email) AS last_reminded_at
FROM mailroom.expected_signers x
WHERE x.doc_id = %(doc_id)s
  AND NOT EXISTS (SELECT 1 FROM mailroom.signatures g WHERE g.doc_id = x.doc_id AND g.signer_email = x.email)
ORDER BY x.email
LIMIT 200
"""

# --- Failures -------------------------------------------------------------------------------

# The Failures screen lists failed email (newest failure first) and then retrying email (next attempt
# first); each part is a keyset page over its own partial index, keyed by (kind, sort_at, id).
FAILED_PAGE = """
SELECT id, recipient_email, subject, last_error, retry_count, max_retries, next_retry_at,
       finished_at, scheduled_for, status, 'failed' AS kind, finished_at AS sort_at
FROM mailroom.email_queue
WHERE status = 'failed'
  AND (%(after_at)s::timestamptz IS NULL OR (finished_at, id) < (%(after_at)s, %(after_id)s))
  AND (%(pattern)s::text IS NULL OR recipient_email ILIKE %(pattern)s OR subject ILIKE %(pattern)s
       OR last_error ILIKE %(pattern)s)
ORDER BY finished_at DESC, id DESC
LIMIT %(limit)s
"""

# Retrying email is pending with attempts behind it: walked in due order over email_queue_retrying_idx.
RETRYING_PAGE = """
SELECT id, recipient_email, subject, last_error, retry_count, max_retries, next_retry_at,
       finished_at, scheduled_for, status, 'retrying' AS kind, scheduled_for AS sort_at
FROM mailroom.email_queue
WHERE status = 'pending' AND retry_count > 0
  AND (%(after_at)s::timestamptz IS NULL OR (scheduled_for, id) > (%(after_at)s, %(after_id)s))
  AND (%(pattern)s::text IS NULL OR recipient_email ILIKE %(pattern)s OR subject ILIKE %(pattern)s
       OR last_error ILIKE %(pattern)s)
ORDER BY scheduled_for, id
LIMIT %(limit)s
"""

# How many of each the Failures screen's title reports, each stopping at the cap (shown as "N+").
FAILURE_COUNTS = """
SELECT (SELECT count(*) FROM (SELECT 1 FROM mailroom.email_queue
         WHERE status = 'failed' LIMIT %(cap)s) s) AS failed,
       (SELECT count(*) FROM (SELECT 1 FROM mailroom.email_queue
         WHERE status = 'pending' AND retry_count > 0 LIMIT %(cap)s) s) AS retrying
"""

EMAIL_DETAIL = """
SELECT id, status, recipient_email, subject, priority, campaign_id, template, retry_count, max_retries,
       scheduled_for, next_retry_at, last_error, created_at, sent_at, finished_at
FROM mailroom.email_queue WHERE id = %(id)s
"""

# One index probe per partition on (email_id, attempted_at).
SEND_HISTORY = """
SELECT l.id, l.attempted_at, l.attempt, l.outcome, l.smtp_code, l.enhanced_code, l.response, l.duration_ms,
       s.name AS sender
FROM mailroom.send_logs l
LEFT JOIN mailroom.sender_accounts s ON s.id = l.sender_account_id
WHERE l.email_id = %(id)s
ORDER BY l.attempted_at, l.id
LIMIT 500
"""

# --- Accounts -------------------------------------------------------------------------------

ACCOUNTS_PAGE = """
SELECT id, email, login, status, locale, status_changed_at, activated_at, suspended_at
FROM mailroom.accounts
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(after_id)s::bigint IS NULL OR id > %(after_id)s)
  AND (%(pattern)s::text IS NULL OR email ILIKE %(pattern)s OR login ILIKE %(pattern)s)
ORDER BY id
LIMIT %(limit)s
"""

# Per-status counts over the status index, each stopping at the cap (shown as "N+").
ACCOUNT_COUNTS = """
SELECT s.status, (SELECT count(*) FROM (SELECT 1 FROM mailroom.accounts a WHERE a.status = s.status
                                        LIMIT %(cap)s) c) AS n
FROM unnest(ARRAY['provisioned', 'active', 'suspended']) AS s(status)
"""

# --- Schedule -------------------------------------------------------------------------------

EVENTS_DUE = """
SELECT e.id, e.event_type, e.status, e.due_at, e.local_due_at, e.time_zone, p.first_name, p.last_name,
       e.failure_reason
FROM mailroom.events e
JOIN mailroom.people p ON p.id = e.person_id
WHERE e.status = 'pending' AND e.due_at <= %(now)s::timestamptz + interval '24 hours'
  AND (%(pattern)s::text IS NULL OR p.first_name || ' ' || p.last_name ILIKE %(pattern)s
       OR e.time_zone ILIKE %(pattern)s)
ORDER BY e.due_at, e.id
LIMIT %(limit)s
"""

# Retrying: pending again after an attempt to render or enqueue its email failed (over the outcome index).
EVENTS_TROUBLE = """
SELECT e.id, e.event_type,
       CASE WHEN e.status = 'pending' THEN 'retrying' ELSE e.status END AS status,
       e.due_at, e.local_due_at, e.time_zone, p.first_name, p.last_name, e.failure_reason, e.retry_count
FROM mailroom.events e
JOIN mailroom.people p ON p.id = e.person_id
WHERE (e.status IN ('missed', 'failed') OR (e.status = 'pending' AND e.retry_count > 0))
  AND e.updated_at > %(now)s::timestamptz - interval '30 days'
  AND (%(pattern)s::text IS NULL OR p.first_name || ' ' || p.last_name ILIKE %(pattern)s
       OR e.time_zone ILIKE %(pattern)s)
ORDER BY e.updated_at DESC, e.id
LIMIT %(limit)s
"""

# --- Queue ----------------------------------------------------------------------------------

# The queue screen's breakdowns: exact over the pending index while the pending set is under the cap,
# else from a 1% page sample scaled up (marked as estimates on screen).
PENDING_BY_PRIORITY = """
SELECT priority, count(*) AS n, count(*) FILTER (WHERE scheduled_for <= %(now)s) AS due,
       min(scheduled_for) AS oldest
FROM mailroom.email_queue
WHERE status = 'pending'
GROUP BY priority
ORDER BY priority DESC
LIMIT 50
"""

PENDING_BY_CAMPAIGN = """
SELECT campaign_id, count(*) AS n, count(*) FILTER (WHERE scheduled_for <= %(now)s) AS due,
       min(scheduled_for) AS oldest
FROM mailroom.email_queue
WHERE status = 'pending' AND (%(pattern)s::text IS NULL OR campaign_id ILIKE %(pattern)s)
GROUP BY campaign_id
ORDER BY count(*) DESC, campaign_id NULLS LAST
LIMIT 50
"""

# The sampled share of each group times the planner's row count of the table (see console.figures).
SAMPLED_BY_PRIORITY = """
WITH s AS MATERIALIZED (SELECT status, priority, scheduled_for
                        FROM mailroom.email_queue TABLESAMPLE SYSTEM (1) REPEATABLE (7)),
     scale AS (SELECT greatest((SELECT reltuples FROM pg_class WHERE oid = 'mailroom.email_queue'::regclass), 0)
                      / greatest((SELECT count(*) FROM s), 1) AS k)
SELECT priority, round(count(*) * max(scale.k))::bigint AS n,
       round(count(*) FILTER (WHERE scheduled_for <= %(now)s) * max(scale.k))::bigint AS due,
       min(scheduled_for) AS oldest
FROM s CROSS JOIN scale
WHERE status = 'pending'
GROUP BY priority
ORDER BY priority DESC
LIMIT 50
"""

SAMPLED_BY_CAMPAIGN = """
WITH s AS MATERIALIZED (SELECT status, campaign_id, scheduled_for
                        FROM mailroom.email_queue TABLESAMPLE SYSTEM (1) REPEATABLE (7)),
     scale AS (SELECT greatest((SELECT reltuples FROM pg_class WHERE oid = 'mailroom.email_queue'::regclass), 0)
                      / greatest((SELECT count(*) FROM s), 1) AS k)
SELECT campaign_id, round(count(*) * max(scale.k))::bigint AS n,
       round(count(*) FILTER (WHERE scheduled_for <= %(now)s) * max(scale.k))::bigint AS due,
       min(scheduled_for) AS oldest
FROM s CROSS JOIN scale
WHERE status = 'pending' AND (%(pattern)s::text IS NULL OR campaign_id ILIKE %(pattern)s)
GROUP BY campaign_id
ORDER BY count(*) DESC, campaign_id NULLS LAST
LIMIT 50
"""

PENDING_CAPPED = """
SELECT count(*) AS n FROM (SELECT 1 FROM mailroom.email_queue WHERE status = 'pending' LIMIT %(cap)s) s
"""

EXACT_LIMIT = 50_000


@dataclass
class Overview:
    """Everything the first screen shows."""

    counts: dict[str, Count]
    oldest_due: datetime | None
    sent_per_minute: list[float]
    rates: Rates
    senders: list[Row]
    documents: list[Row]
    latest_failures: list[Row]
    # Opens, clicks and unsubscribes per hour over the last 24 hours, oldest hour first.
    tracking: dict[str, list[int]] = field(default_factory=dict)


class PendingGroups(NamedTuple):
    """Pending email by priority and by campaign, and whether the figures are estimates from a sample."""

    by_priority: list[Row]
    by_campaign: list[Row]
    estimated: bool


class ScheduledEvents(NamedTuple):
    """Events due in the next 24 hours (and overdue ones), and the last month's missed and failed ones."""

    due: list[Row]
    trouble: list[Row]


# Where a Failures page starts: after this (kind, sort_at, id), kind being 'failed' or 'retrying'.
FailureKey = tuple[str, datetime, int]
FAILURE_KINDS = ("all", "failed", "retrying")


@dataclass
class Page:
    """One keyset page of a long list, and whether more follow it."""

    rows: list[Row]
    more: bool
    extra: dict[str, Any] = field(default_factory=dict)


def like_pattern(text: str | None) -> str | None:
    """An ILIKE pattern matching `text` anywhere, with LIKE's wildcards taken literally."""
    if not text:
        return None
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _keyset(after: FailureKey | None, pattern: str | None, limit: int) -> dict[str, Any]:
    return {
        "after_at": after[1] if after else None,
        "after_id": after[2] if after else None,
        "pattern": pattern,
        "limit": limit,
    }


def failure_key(row: Row) -> FailureKey:
    """The key a Failures page following `row` starts after."""
    return (str(row["kind"]), row["sort_at"], int(row["id"]))


class ConsoleData:
    """The console's one data source: an autocommit async connection that reconnects when it breaks or
    its server stops taking writes (a failover: the primary's figures are on the new primary)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.page_size = PAGE_SIZE
        # Above this many rows a count is not finished exactly on a refresh; it is capped or estimated.
        self.exact_limit = EXACT_LIMIT
        self._conn: psycopg.AsyncConnection[Row] | None = None
        self._lock = asyncio.Lock()
        self._renew = False

    async def close(self) -> None:
        """Close the connection (the next query opens a new one)."""
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    def renew(self) -> None:
        """Read through a new connection from the next query on: the live feed found the database
        again after losing it, perhaps on another node (this connection may be on the old primary)."""
        self._renew = True

    async def _connection(self) -> psycopg.AsyncConnection[Row]:
        if self._conn is not None and not self._conn.closed and (self._renew or server_read_only(self._conn)):
            await self._conn.close()  # a read-only server said so with its last answer, at no cost
        self._renew = False
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, row_factory=dict_row, application_name="mailroom-console"
            )
        return self._conn

    async def fetch(self, query: str, params: dict[str, Any] | None = None) -> list[Row]:
        """Run one read query; a connection that met an unavailable database is replaced once before
        giving up."""
        async with self._lock:
            for attempt in (1, 2):
                conn = await self._connection()
                try:
                    # Never prepared: the optional-filter queries need a custom plan for each set of values.
                    cur = await conn.execute(query, params or {}, prepare=False)
                    return await cur.fetchall()
                except psycopg.Error as exc:
                    if attempt == 2 or not database_unavailable(exc):
                        raise
                    await conn.close()
                    self._conn = None
        raise AssertionError("unreachable")

    async def overview(self, now: datetime, *, text: str | None = None) -> Overview:
        """Queue depth, the last hour's sending, senders, signature completion and the latest failures."""
        counts, oldest_due = await queue_counts(self, now)
        per_minute, rates = await last_hour(self, now)
        return Overview(
            counts=counts,
            oldest_due=oldest_due,
            sent_per_minute=per_minute,
            rates=rates,
            senders=await self.senders(now),
            documents=await self.documents(limit=8, text=text),
            latest_failures=(await self.failures("failed", None, limit=8, counts=False)).rows,
            tracking=await self.tracking(now),
        )

    async def tracking(self, now: datetime) -> dict[str, list[int]]:
        """Opens, clicks and unsubscribes in each of the 24 hours before `now`, oldest first."""
        hours: dict[str, list[int]] = {kind: [0] * 24 for kind in TRACKING_KINDS}
        for row in await self.fetch(TRACKING_PER_HOUR, {"now": now}):
            ago = round((now - row["hour"]).total_seconds() / 3600)  # 1 for the last hour ... 24
            if 1 <= ago <= 24:
                hours[str(row["kind"])][24 - ago] = int(row["n"])
        return hours

    async def senders(self, now: datetime, reputation_window: int = DEFAULT_WINDOW) -> list[Row]:
        """Every sender account with the UTC day of `now`'s usage, and its hard bounces and complaints
        over its last `reputation_window` deliveries (`deliveries`, `hard_bounces`, `complaints`)."""
        rows = await self.fetch(SENDERS, {"now": now})
        standing = {
            r["name"]: r for r in await self.fetch(REPUTATION, {"window": reputation_window, "name": None})
        }
        empty = {"deliveries": 0, "hard_bounces": 0, "complaints": 0}
        return [{**row, **{k: standing.get(row["name"], empty)[k] for k in empty}} for row in rows]

    async def documents(self, limit: int = 200, *, text: str | None = None) -> list[Row]:
        """Documents with expected and signed counts, incomplete ones first, optionally matching a text."""
        return await self.fetch(DOCUMENTS, {"limit": limit, "pattern": like_pattern(text)})

    async def missing_signers(self, doc_id: str) -> list[Row]:
        """Expected signers of one document who have not signed yet."""
        return await self.fetch(MISSING_SIGNERS, {"doc_id": doc_id})

    async def failures(
        self,
        kind: str,
        after: FailureKey | None,
        *,
        text: str | None = None,
        limit: int | None = None,
        counts: bool = True,
    ) -> Page:
        """A page of email after the key `after`: failed (newest failure first), then retrying (next due first).

        `kind` is 'all', 'failed' or 'retrying'. The retrying part is read only once the failed part
        runs out, so a page costs two index walks of at most a page each, at 100 or 100,000 failures.
        """
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown kind of failure list: {kind!r}")
        limit = limit or self.page_size
        pattern = like_pattern(text)
        after_kind = after[0] if after else None
        rows: list[Row] = []
        if kind in ("all", "failed") and after_kind in (None, "failed"):
            rows = await self.fetch(FAILED_PAGE, _keyset(after, pattern, limit + 1))
        if kind in ("all", "retrying") and len(rows) <= limit:
            start = after if after_kind == "retrying" else None
            rows += await self.fetch(RETRYING_PAGE, _keyset(start, pattern, limit + 1 - len(rows)))
        extra: dict[str, Any] = {}
        if counts:
            extra["counts"] = (await self.fetch(FAILURE_COUNTS, {"cap": self.exact_limit + 1}))[0]
        return Page(rows=rows[:limit], more=len(rows) > limit, extra=extra)

    async def email_detail(self, email_id: int) -> tuple[Row | None, list[Row]]:
        """One email and every attempt in its send log."""
        rows = await self.fetch(EMAIL_DETAIL, {"id": email_id})
        history = await self.fetch(SEND_HISTORY, {"id": email_id})
        return (rows[0] if rows else None), history

    async def accounts(self, status: str | None, after_id: int | None, *, text: str | None = None) -> Page:
        """A page of accounts by id, optionally of one status or matching a text."""
        limit = self.page_size
        rows = await self.fetch(
            ACCOUNTS_PAGE,
            {"status": status, "after_id": after_id, "pattern": like_pattern(text), "limit": limit + 1},
        )
        cap = self.exact_limit + 1
        counts = {str(r["status"]): int(r["n"]) for r in await self.fetch(ACCOUNT_COUNTS, {"cap": cap})}
        return Page(rows=rows[:limit], more=len(rows) > limit, extra={"counts": counts})

    async def schedule(
        self, now: datetime, limit: int | None = None, *, text: str | None = None
    ) -> ScheduledEvents:
        """Events due in the next 24 hours (and overdue ones), and the last month's missed and failed events."""
        params = {"now": now, "limit": limit or self.page_size, "pattern": like_pattern(text)}
        due = await self.fetch(EVENTS_DUE, params)
        trouble = await self.fetch(EVENTS_TROUBLE, params)
        return ScheduledEvents(due, trouble)

    async def queue(self, now: datetime, *, text: str | None = None) -> PendingGroups:
        """Pending email by priority and by campaign (optionally matching a text), and whether they are estimates."""
        capped = await self.fetch(PENDING_CAPPED, {"cap": self.exact_limit + 1})
        estimated = int(capped[0]["n"]) > self.exact_limit
        by_priority = await self.fetch(
            SAMPLED_BY_PRIORITY if estimated else PENDING_BY_PRIORITY, {"now": now}
        )
        by_campaign = await self.fetch(
            SAMPLED_BY_CAMPAIGN if estimated else PENDING_BY_CAMPAIGN,
            {"now": now, "pattern": like_pattern(text)},
        )
        return PendingGroups(by_priority, by_campaign, estimated)
