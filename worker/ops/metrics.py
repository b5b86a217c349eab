"""Gauges read from the database for a Prometheus scrape: the queue, the senders, the workers.

One collector per listener (the supervisor's, never each worker process's): a scrape sees each figure
once per host, and the figures are the same from every host, so dashboards and rules take their
`max` across instances, never their sum. Reading them costs a bounded amount of work whatever the
queue holds: each status is counted exactly up to `EXACT_UP_TO` rows through its partial index,
and past that the planner's estimate for that index (`pg_class.reltuples`, kept by autovacuum) is
used; the oldest due email and the last send are one index endpoint each; the senders table is
small; reputation reads a bounded window per sender. The result is cached for `cache_seconds`, so
several Prometheus servers scraping at once cost one read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from psycopg import sql
from psycopg.rows import dict_row

from worker.core.config import Settings
from worker.core.reputation import sender_reputations
from worker.ops.senders import list_senders

# Below this many rows a status's count is exact; above it, the partial index's estimate.
EXACT_UP_TO = 10_000
CACHE_SECONDS = 10.0
CIRCUIT_STATES = ("closed", "half_open", "open")
USABLE = ("active", "warming_up")
ALIVE_SECONDS = 60.0

# Each status and the partial index that holds its rows.
STATUS_INDEXES = (
    ("unrendered", "email_queue_unrendered_idx"),
    ("pending", "email_queue_due_idx"),
    ("assigned", "email_queue_lease_idx"),
    ("sent", "email_queue_sent_idx"),
    ("bounced", "email_queue_bounced_idx"),
    ("failed", "email_queue_failed_idx"),
    ("cancelled", "email_queue_cancelled_idx"),
    ("suppressed", "email_queue_suppressed_idx"),
)
# Each status counted through its own partial index (the literal status lets the planner pick it),
# with that index's row estimate beside it; composed once into plain text.
QUEUE = (
    sql.SQL("\nUNION ALL\n")
    .join(
        sql.SQL(
            "SELECT {status} AS status,"
            " (SELECT count(*) FROM (SELECT 1 FROM mailroom.email_queue WHERE status = {status}"
            " LIMIT %(cap)s) c) AS exact,"
            " (SELECT reltuples FROM pg_class WHERE oid = to_regclass({index})) AS estimate"
        ).format(status=sql.Literal(status), index=sql.Literal(f"mailroom.{index}"))
        for status, index in STATUS_INDEXES
    )
    .as_string(None)
)

# Due email (capped like the rest), the oldest due one's age, the last send, the live workers.
FIGURES = """
SELECT (SELECT count(*) FROM (SELECT 1 FROM mailroom.email_queue
                              WHERE status = 'pending' AND scheduled_for <= now() LIMIT %(cap)s) c) AS due,
       (SELECT reltuples FROM pg_class WHERE oid = to_regclass('mailroom.email_queue_due_idx')) AS due_estimate,
       extract(epoch FROM now() - (SELECT min(scheduled_for) FROM mailroom.email_queue
                                   WHERE status = 'pending' AND scheduled_for <= now()))::float AS oldest_due,
       extract(epoch FROM coalesce(
           (SELECT max(sent_at) FROM mailroom.email_queue WHERE status = 'sent'),
           (SELECT attempted_at FROM mailroom.send_logs WHERE outcome = 'sent'
            ORDER BY attempted_at DESC LIMIT 1)))::float AS last_sent,
       (SELECT count(*) FROM mailroom.workers
        WHERE seen_at > now() - make_interval(secs => %(alive)s)) AS workers_alive
"""


def capped(exact: int, estimate: float | None, cap: int = EXACT_UP_TO) -> float:
    """The exact count below the cap; at the cap, the index's estimate (never less than the cap)."""
    if exact < cap:
        return float(exact)
    return max(float(cap), float(estimate or 0.0))


@dataclass
class Reading:
    """One read of the database's figures, as metric families, and when it was taken."""

    families: list[Metric]
    at: float


@dataclass(eq=False)  # a registry keeps its collectors in a dict: hashed by identity
class DatabaseGauges(Collector):
    """A Prometheus collector of the database's figures, cached for `cache_seconds`."""

    url: str
    settings: Settings
    cache_seconds: float = CACHE_SECONDS
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _conn: psycopg.Connection[Any] | None = None
    _last: Reading | None = None

    def collect(self) -> Iterator[Metric]:
        """The cached figures, read again once they are older than `cache_seconds`."""
        with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last.at >= self.cache_seconds:
                self._last = Reading(self._read(), now)
            families = self._last.families
        yield from families

    def close(self) -> None:
        """Close the collector's connection."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _read(self) -> list[Metric]:
        started = time.perf_counter()
        up = GaugeMetricFamily(
            "mailroom_database_up", "1 when the last read of the database's figures worked"
        )
        families: list[Metric] = []
        # A connection kept from an earlier scrape may have died with a server restart: one more try
        # on a new connection before the database is said to be down.
        for attempt in (1, 2):
            reused = self._conn is not None
            try:
                families = self._families(self._connection())
                up.add_metric([], 1)
                break
            except psycopg.Error:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                if attempt == 2 or not reused:
                    up.add_metric([], 0)
                    break
        took = GaugeMetricFamily(
            "mailroom_database_read_seconds", "Seconds the last read of the database's figures took"
        )
        took.add_metric([], time.perf_counter() - started)
        return [up, took, *families]

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
        return self._conn

    def _families(self, conn: psycopg.Connection[Any]) -> list[Metric]:
        with conn.cursor(row_factory=dict_row) as cur:
            queue = cur.execute(QUEUE, {"cap": EXACT_UP_TO}).fetchall()
            figures = cur.execute(FIGURES, {"cap": EXACT_UP_TO, "alive": ALIVE_SECONDS}).fetchone()
            streams = cur.execute(DUE_BY_STREAM).fetchall()
            hooks = cur.execute(WEBHOOKS).fetchall()
        assert figures is not None
        senders = list_senders(conn)
        reputations = sender_reputations(conn, window=self.settings.health_reputation_deliveries)
        return [
            *_queue_families(queue, figures),
            *_sender_families(senders, reputations),
            *_stream_families(streams, senders),
            *_webhook_families(hooks),
        ]


# Due email per message stream (the claim's index leads with the stream).
DUE_BY_STREAM = """
SELECT stream, count(*) AS due FROM mailroom.email_queue
WHERE status = 'pending' AND scheduled_for <= now() GROUP BY stream
"""


# Each webhook endpoint's waiting and given-up deliveries, its failures in a row, and its oldest wait.
WEBHOOKS = """
SELECT p.id, p.status, p.failures,
       count(d.event_id) FILTER (WHERE d.status = 'pending') AS pending,
       count(d.event_id) FILTER (WHERE d.status = 'dead') AS dead,
       coalesce(extract(epoch FROM now() - min(v.occurred_at) FILTER (WHERE d.status = 'pending')), 0) AS oldest
FROM mailroom.webhook_endpoints p
LEFT JOIN mailroom.webhook_deliveries d ON d.endpoint_id = p.id AND d.status IN ('pending', 'dead')
LEFT JOIN mailroom.webhook_events v ON v.id = d.event_id
GROUP BY p.id ORDER BY p.id
"""


def _webhook_families(hooks: list[dict[str, Any]]) -> list[Metric]:
    """Per endpoint: deliveries waiting and given up, failures in a row, the oldest waiting event's age,
    and whether it is active (0 when paused or disabled)."""
    deliveries = GaugeMetricFamily(
        "mailroom_webhook_deliveries", "Webhook deliveries waiting or given up, by endpoint",
        labels=["endpoint", "status"],
    )  # fmt: skip
    failures = GaugeMetricFamily(
        "mailroom_webhook_failures", "Failed attempts in a row of a webhook endpoint", labels=["endpoint"]
    )
    oldest = GaugeMetricFamily(
        "mailroom_webhook_oldest_pending_seconds", "Age of the oldest event waiting for an endpoint",
        labels=["endpoint"],
    )  # fmt: skip
    active = GaugeMetricFamily(
        "mailroom_webhook_endpoint_active", "1 when the webhook endpoint is active", labels=["endpoint"]
    )
    for row in hooks:
        endpoint = str(row["id"])
        deliveries.add_metric([endpoint, "pending"], int(row["pending"]))
        deliveries.add_metric([endpoint, "dead"], int(row["dead"]))
        failures.add_metric([endpoint], int(row["failures"]))
        oldest.add_metric([endpoint], float(row["oldest"]))
        active.add_metric([endpoint], 1 if row["status"] == "active" else 0)
    return [deliveries, failures, oldest, active]


def _stream_families(streams: list[dict[str, Any]], senders: list[dict[str, Any]]) -> list[Metric]:
    """Due email per stream, and which sender serves which stream: a stream with due email and no usable
    sender serving it is mail nothing sends (`mailroom health`'s stream_without_sender)."""
    due = GaugeMetricFamily(
        "mailroom_stream_due_emails", "Pending emails due now, by message stream", labels=["stream"]
    )
    for row in streams:
        due.add_metric([row["stream"]], int(row["due"]))
    serves = GaugeMetricFamily(
        "mailroom_sender_stream", "1 for each message stream the sender serves", labels=["sender", "stream"]
    )
    for sender in senders:
        for stream in sender["streams"]:
            serves.add_metric([sender["name"], stream], 1)
    return [due, serves]


def _queue_families(queue: list[dict[str, Any]], figures: dict[str, Any]) -> list[Metric]:
    emails = GaugeMetricFamily(
        "mailroom_queue_emails",
        f"Emails in the queue by status (exact up to {EXACT_UP_TO}, then the index's estimate)",
        labels=["status"],
    )
    for row in queue:
        emails.add_metric([row["status"]], capped(int(row["exact"]), row["estimate"]))
    due = GaugeMetricFamily("mailroom_queue_due_emails", "Pending emails due now")
    due.add_metric([], capped(int(figures["due"]), figures["due_estimate"]))
    oldest = GaugeMetricFamily(
        "mailroom_queue_oldest_due_seconds", "Seconds the oldest due email has waited (0 when none is due)"
    )
    oldest.add_metric([], max(float(figures["oldest_due"] or 0.0), 0.0))
    last = GaugeMetricFamily(
        "mailroom_last_sent_timestamp_seconds", "Unix time of the last email sent (0 when none is on record)"
    )
    last.add_metric([], float(figures["last_sent"] or 0.0))
    workers = GaugeMetricFamily(
        "mailroom_workers_alive", "Worker processes with a heartbeat in the last minute"
    )
    workers.add_metric([], int(figures["workers_alive"]))
    return [emails, due, oldest, last, workers]


def _sender_families(senders: list[dict[str, Any]], reputations: list[Any]) -> list[Metric]:
    usable = GaugeMetricFamily(
        "mailroom_sender_usable",
        "1 when the sender may send now (active or warming up, circuit closed)",
        labels=["sender"],
    )
    status = GaugeMetricFamily(
        "mailroom_sender_status", "1 for the sender's current status", labels=["sender", "status"]
    )
    circuit = GaugeMetricFamily(
        "mailroom_sender_circuit",
        "1 for the sender's circuit state (closed, half_open, open), 0 for the others",
        labels=["sender", "state"],
    )
    used = GaugeMetricFamily(
        "mailroom_sender_quota_used", "Emails the sender sent today (UTC)", labels=["sender"]
    )
    limit = GaugeMetricFamily(
        "mailroom_sender_quota_limit",
        "The sender's limit today (daily limit or warm-up stage)",
        labels=["sender"],
    )
    for s in senders:
        name = str(s["name"])
        usable.add_metric([name], int(s["status"] in USABLE))
        status.add_metric([name, str(s["status"])], 1)
        for state in CIRCUIT_STATES:
            circuit.add_metric([name, state], int(s["circuit_state"] == state))
        used.add_metric([name], int(s["sent_today"]))
        limit.add_metric([name], int(s["effective_limit"]))
    deliveries = GaugeMetricFamily(
        "mailroom_sender_reputation_deliveries",
        "Deliveries in the sender's reputation window (its last MAILROOM_HEALTH_REPUTATION_DELIVERIES)",
        labels=["sender"],
    )
    bounces = GaugeMetricFamily(
        "mailroom_sender_hard_bounce_rate",
        "Share of the window's deliveries that bounced hard",
        labels=["sender"],
    )
    complaints = GaugeMetricFamily(
        "mailroom_sender_complaint_rate",
        "Share of the window's deliveries that drew a complaint",
        labels=["sender"],
    )
    for r in reputations:
        deliveries.add_metric([r.sender], r.deliveries)
        bounces.add_metric([r.sender], r.hard_bounces / r.deliveries if r.deliveries else 0.0)
        complaints.add_metric([r.sender], r.complaints / r.deliveries if r.deliveries else 0.0)
    return [usable, status, circuit, used, limit, deliveries, bounces, complaints]


# Every gauge name this module exports (the dashboard test checks its queries against them).
GAUGE_NAMES = (
    "mailroom_database_up",
    "mailroom_database_read_seconds",
    "mailroom_queue_emails",
    "mailroom_queue_due_emails",
    "mailroom_queue_oldest_due_seconds",
    "mailroom_last_sent_timestamp_seconds",
    "mailroom_workers_alive",
    "mailroom_sender_usable",
    "mailroom_sender_status",
    "mailroom_sender_circuit",
    "mailroom_sender_quota_used",
    "mailroom_sender_quota_limit",
    "mailroom_sender_reputation_deliveries",
    "mailroom_sender_hard_bounce_rate",
    "mailroom_sender_complaint_rate",
    "mailroom_stream_due_emails",
    "mailroom_sender_stream",
    "mailroom_webhook_deliveries",
    "mailroom_webhook_failures",
    "mailroom_webhook_oldest_pending_seconds",
    "mailroom_webhook_endpoint_active",
)
