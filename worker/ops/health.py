"""Health of the queue and of what sends it: is email piling up, stalled, or unable to go out?

The queue: the backlog (email due now, pending or being sent) is larger than `health_max_pending`;
the oldest due email has waited longer than `health_max_oldest_pending_seconds`; nothing was sent
for `health_max_idle_seconds` while email has been due (or in a worker's hands) for longer than
`health_idle_grace_seconds` (the grace keeps a quiet queue from raising an alarm the moment a new
email arrives). What sends it: email is due and no sender can send it (each sender's reason said);
a sender is unreachable (its circuit is open) while email is due; the share of failed attempts over
the last `health_failure_window_seconds` passes `health_max_attempt_failure_rate`; no worker has
been alive while email is due; a sender's hard bounces or complaints among its last
`health_reputation_deliveries` deliveries (1,000) pass their thresholds (5% and 0.3%, the limits the
large mailbox providers publish; see worker.core.reputation). A sender suspended while email is due is a
warning: mail still flows through the others, but at risk. So is a bounce quarantine past
`QUARANTINE_WARN_SHARE` of `quarantine_max_bytes`, or one that dropped messages today (full, or a client
over its daily limit): what it drops an operator never sees. Every figure comes from indexes over the active
sets, the sender table and one window of the attempt log.

Each reason is a `Finding` (kind, text, advice, the sender it names): `mailroom health` prints its text
and advice, the console's banner its text and the key that fixes it. Both read `check_health`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

from worker.core.config import Settings

# The whole report's parts, loaded by `check_health`: `undeliverable` (what `worker --drain` asks as it
# stops) needs none of them.
if TYPE_CHECKING:
    from worker.core.failover import CircuitView
    from worker.core.reputation import Reputation
    from worker.ops.quarantine_upkeep import QuarantineUsage

_FIGURES = """
SELECT coalesce(%(now)s, now()) AS now,
       (SELECT count(*) FROM mailroom.email_queue
        WHERE status = 'pending' AND scheduled_for <= coalesce(%(now)s, now())) AS due,
       (SELECT count(*) FROM mailroom.email_queue WHERE status = 'assigned') AS assigned,
       (SELECT min(scheduled_for) FROM mailroom.email_queue
        WHERE status = 'pending' AND scheduled_for <= coalesce(%(now)s, now())) AS oldest_due,
       (SELECT max(sent_at) FROM mailroom.email_queue WHERE status = 'sent') AS last_sent_at,
       EXISTS (SELECT 1 FROM mailroom.email_queue
               WHERE status = 'pending'
                 AND scheduled_for <= coalesce(%(now)s, now()) - make_interval(secs => %(grace)s))
       OR EXISTS (SELECT 1 FROM mailroom.email_queue
                  WHERE status = 'assigned'
                    AND assigned_at <= coalesce(%(now)s, now()) - make_interval(secs => %(grace)s))
           AS waiting_past_grace
"""


_SENDERS = """
SELECT name, status, status_reason, circuit_state, circuit_reason, circuit_since, streams,
       status IN ('active', 'warming_up')
       OR (status = 'paused_limit_reached' AND limit_reached_on < (now() AT TIME ZONE 'UTC')::date) AS may_send
FROM mailroom.sender_accounts ORDER BY name
"""

# Due email per message stream (the claim's index leads with the stream).
_DUE_BY_STREAM = """
SELECT stream, count(*) AS n FROM mailroom.email_queue
WHERE status = 'pending' AND scheduled_for <= now() GROUP BY stream ORDER BY stream
"""

_ATTEMPTS = """
SELECT count(*) AS attempts,
       count(*) FILTER (WHERE outcome NOT IN ('sent', 'suppressed')) AS failed
FROM mailroom.send_logs
WHERE attempted_at > now() - make_interval(secs => %(window)s) AND outcome <> 'suppressed'
"""

# Senders an operator took out of service (paused ones are meant to rest): a warning while others still send.
BLOCKED_STATES = ("suspended",)

# A worker that missed this many seconds of heartbeats is taken for dead.
WORKER_ALIVE_SECONDS = 60.0
_WORKERS = "SELECT count(*) FROM mailroom.workers WHERE seen_at > now() - make_interval(secs => %(alive)s)"


PROBLEM = "problem"
WARNING = "warning"

# The bounce quarantine's fill past which health warns (it drops new messages when full).
QUARANTINE_WARN_SHARE = 0.8


@dataclass(frozen=True)
class Finding:
    """One reason the queue is unhealthy (a problem) or at risk (a warning), said for people and kept apart.

    `kind` is one of: backlog, oldest_pending, idle, no_sender, stream_without_sender (email of a message
    stream is due and no usable sender serves it), sender_unreachable, sender_suspended,
    no_worker, database_unavailable (this process's database circuit is open: see
    `database_findings`), attempt_failures, bounce_rate, complaint_rate, quarantine_full, quarantine_dropped,
    sender_dns (the latest DNS check of a sender: a problem when DKIM does not verify), dmarc_full,
    dmarc_refused, dmarc_disputed (warnings: see worker.ops.dmarc_report.dmarc_findings), webhook_failing,
    webhook_disabled, webhook_paused (warnings: see worker.ops.webhook_health).
    `advice` is what to run about it.
    """

    kind: str
    text: str
    advice: str = ""
    severity: str = PROBLEM
    sender: str | None = None

    @property
    def line(self) -> str:
        """The text and its advice, as `mailroom health` prints it."""
        return f"{self.text}; {self.advice}" if self.advice else self.text


@dataclass
class HealthReport:
    """The figures, the thresholds they were held to, and why the queue is unhealthy (empty when it is fine)."""

    pending: int
    oldest_pending_seconds: float | None
    last_sent_at: datetime | None
    seconds_since_last_send: float | None
    thresholds: dict[str, float]
    findings: list[Finding] = field(default_factory=list)
    senders: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    attempt_failure_rate: float | None = None
    workers_alive: int = 0
    reputations: list[Reputation] = field(default_factory=list)
    quarantine: QuarantineUsage | None = None

    @property
    def reasons(self) -> list[str]:
        """Why the queue is unhealthy, one line each (empty when it is fine)."""
        return [f.line for f in self.findings if f.severity == PROBLEM]

    @property
    def warnings(self) -> list[str]:
        """What puts the queue at risk without stopping it, one line each."""
        return [f.line for f in self.findings if f.severity == WARNING]

    def add(self, kind: str, text: str, advice: str = "", **more: Any) -> None:
        """Note one finding."""
        self.findings.append(Finding(kind, text, advice, **more))

    @property
    def ok(self) -> bool:
        """No threshold was crossed."""
        return not self.reasons

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for `mailroom health --json`."""
        return {
            "ok": self.ok,
            "reasons": self.reasons,
            "warnings": self.warnings,
            "pending": self.pending,
            "oldest_pending_seconds": self.oldest_pending_seconds,
            "last_sent_at": self.last_sent_at.isoformat() if self.last_sent_at else None,
            "seconds_since_last_send": self.seconds_since_last_send,
            "thresholds": self.thresholds,
            "senders": self.senders,
            "attempts_in_window": self.attempts,
            "attempt_failure_rate": self.attempt_failure_rate,
            "workers_alive": self.workers_alive,
            "reputation": [r.as_dict() for r in self.reputations],
            "quarantine": vars(self.quarantine) if self.quarantine else None,
        }


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def check_health(
    conn: psycopg.Connection[Any], settings: Settings, *, now: datetime | None = None
) -> HealthReport:
    """Measure the queue and its senders against the thresholds in `settings`; `now` defaults to the
    database's clock (the sender, attempt, bounce and worker checks always use the database's clock)."""
    from worker.core.reputation import sender_reputations
    from worker.ops.dmarc_report import dmarc_findings
    from worker.ops.quarantine_upkeep import quarantine_usage
    from worker.ops.webhook_health import webhook_findings

    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_FIGURES, {"now": now, "grace": settings.health_idle_grace_seconds}).fetchone()
        senders = cur.execute(_SENDERS).fetchall()
        attempts = cur.execute(_ATTEMPTS, {"window": settings.health_failure_window_seconds}).fetchone()
        alive = cur.execute(_WORKERS, {"alive": WORKER_ALIVE_SECONDS}).fetchone()
    assert row is not None
    assert attempts is not None
    assert alive is not None
    report = _queue_report(row, settings)
    report.senders = [_sender_view(s) for s in senders]
    report.attempts = int(attempts["attempts"])
    if report.attempts:
        report.attempt_failure_rate = round(int(attempts["failed"]) / report.attempts, 4)
    report.reputations = sender_reputations(conn, window=settings.health_reputation_deliveries)
    report.workers_alive = int(alive["count"])
    due = int(row["due"])
    _check_queue(report, row, settings)
    if due:
        # No grace here: the idle check waits because a worker may be about to send; with no usable
        # sender nothing can, and the operator is told at once.
        _check_senders(report, due)
        _check_streams(report, cur_rows(conn, _DUE_BY_STREAM))
        if not report.workers_alive and row["waiting_past_grace"]:
            report.add(
                "no_worker",
                f"{due} emails are due and no worker has been alive in the last {WORKER_ALIVE_SECONDS:.0f} s",
                "start one: mailroom worker",
            )
    _check_attempts(report, settings)
    _check_bounces(report, settings)
    report.quarantine = quarantine_usage(conn)
    _check_quarantine(report, report.quarantine, settings)
    _check_dns(report, conn)
    for f in dmarc_findings(conn, settings.dmarc_max_records):
        report.add(f.kind, f.text, f.advice, severity=WARNING)
    for w in webhook_findings(conn):
        report.add(w.kind, w.text, w.advice, severity=WARNING)
    return report


def database_findings(circuits: list[tuple[str, CircuitView]]) -> list[Finding]:
    """A problem for each open database circuit of this process (`worker.core.failover.open_circuits`):
    it has found the database unavailable again and again and waits before each try. What its own
    probe, which connects anew, cannot see: a process left on a demoted primary, or cut off from it."""
    return [
        Finding(
            "database_unavailable",
            f"this {role} process has found the database unavailable for {_duration(view.unavailable_seconds)}"
            f" ({view.reason}: {view.error}); next try in {view.retry_in_seconds:.0f} s",
            "a failover under way? MAILROOM_DATABASE_URL should name every node with"
            " target_session_attrs=read-write (docs/high-availability.md)",
        )
        for role, view in circuits
    ]


def undeliverable(conn: psycopg.Connection[Any], settings: Settings) -> Finding | None:
    """The `no_sender` finding when email is due and no sender can send it, else None.

    What `worker --drain` says when it stops with email left: two queries, not the whole health check."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_FIGURES, {"now": None, "grace": settings.health_idle_grace_seconds}).fetchone()
        assert row is not None
        if not row["due"]:
            return None
        senders = cur.execute(_SENDERS).fetchall()
    report = _queue_report(row, settings)
    report.senders = [_sender_view(s) for s in senders]
    _check_senders(report, int(row["due"]))
    _check_streams(report, cur_rows(conn, _DUE_BY_STREAM))
    return next((f for f in report.findings if f.kind in ("no_sender", "stream_without_sender")), None)


def cur_rows(conn: psycopg.Connection[Any], statement: str) -> list[dict[str, Any]]:
    """The rows of a statement without parameters, as dicts."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(statement).fetchall()


def _queue_report(row: dict[str, Any], settings: Settings) -> HealthReport:
    clock: datetime = row["now"]
    pending = int(row["due"]) + int(row["assigned"])
    oldest = (clock - row["oldest_due"]).total_seconds() if row["oldest_due"] else None
    last_sent: datetime | None = row["last_sent_at"]
    since_send = (clock - last_sent).total_seconds() if last_sent else None
    return HealthReport(
        pending=pending,
        oldest_pending_seconds=round(oldest, 3) if oldest is not None else None,
        last_sent_at=last_sent,
        seconds_since_last_send=round(since_send, 3) if since_send is not None else None,
        thresholds={
            "max_pending": settings.health_max_pending,
            "max_oldest_pending_seconds": settings.health_max_oldest_pending_seconds,
            "max_idle_seconds": settings.health_max_idle_seconds,
            "idle_grace_seconds": settings.health_idle_grace_seconds,
            "failure_window_seconds": settings.health_failure_window_seconds,
            "max_attempt_failure_rate": settings.health_max_attempt_failure_rate,
            "min_attempts": settings.health_min_attempts,
            "reputation_deliveries": settings.health_reputation_deliveries,
            "max_bounce_rate": settings.health_max_bounce_rate,
            "max_complaint_rate": settings.health_max_complaint_rate,
        },
    )


def _sender_view(s: dict[str, Any]) -> dict[str, Any]:
    """A sender as health sees it: can it send now, and if not, why; and the streams it serves."""
    streams = list(s["streams"])
    if s["circuit_state"] != "closed" and s["may_send"]:
        since = s["circuit_since"].isoformat() if s["circuit_since"] else None
        return {
            "name": s["name"],
            "state": "unreachable",
            "reason": s["circuit_reason"],
            "since": since,
            "streams": streams,
        }
    if s["status"] == "paused_limit_reached" and s["may_send"]:
        # Yesterday's limit: the sender may send again today, before any worker has reset its status.
        return {"name": s["name"], "state": "active", "reason": None, "since": None, "streams": streams}
    return {
        "name": s["name"],
        "state": s["status"],
        "reason": s["status_reason"],
        "since": None,
        "streams": streams,
    }


def _check_streams(report: HealthReport, due_by_stream: list[dict[str, Any]]) -> None:
    """A stream with due email and no usable sender serving it: nothing sends it (when some sender is
    usable; when none is, `no_sender` says so for all)."""
    usable = [s for s in report.senders if s["state"] in ("active", "warming_up")]
    if not usable:
        return
    served = {stream for s in usable for stream in s["streams"]}
    for row in due_by_stream:
        if row["stream"] not in served:
            report.add(
                "stream_without_sender",
                f"{row['n']} emails of stream {row['stream']} are due and no usable sender account serves that"
                f" stream (serving: {', '.join(sorted(served))})",
                f"mailroom senders edit NAME --streams ...,{row['stream']}",
            )


def _check_queue(report: HealthReport, row: dict[str, Any], settings: Settings) -> None:
    pending, oldest, since_send = (
        report.pending,
        report.oldest_pending_seconds,
        report.seconds_since_last_send,
    )
    if pending > settings.health_max_pending:
        report.add(
            "backlog",
            f"{pending} emails pending, more than the threshold of {settings.health_max_pending}"
            " (MAILROOM_HEALTH_MAX_PENDING)",
        )
    if oldest is not None and oldest > settings.health_max_oldest_pending_seconds:
        report.add(
            "oldest_pending",
            f"the oldest pending email has waited {_duration(oldest)}, longer than"
            f" {_duration(settings.health_max_oldest_pending_seconds)} (MAILROOM_HEALTH_MAX_OLDEST_PENDING_SECONDS)",
            "is a worker running?",
        )
    idle = since_send is None or since_send > settings.health_max_idle_seconds
    if pending and row["waiting_past_grace"] and idle:
        # After retention archived every sent email there is no sending time on record at all.
        when = "(no sent email on record)" if since_send is None else f"in {_duration(since_send)}"
        report.add(
            "idle",
            f"nothing was sent {when} while {pending} emails are pending, some for over"
            f" {_duration(settings.health_idle_grace_seconds)}"
            f" (MAILROOM_HEALTH_MAX_IDLE_SECONDS is {_duration(settings.health_max_idle_seconds)})",
            "the worker may be down",
        )


def _check_senders(report: HealthReport, due: int) -> None:
    usable = [s for s in report.senders if s["state"] in ("active", "warming_up")]
    if not usable:
        why = "; ".join(
            f"{s['name']} {s['state']}" + (f" ({s['reason']})" if s["reason"] else "") for s in report.senders
        )
        report.add(
            "no_sender",
            f"{due} emails are due and no sender can send them: {why or 'no sender account exists'}",
            "resume or fix a sender (mailroom senders list / resume)",
        )
    for s in report.senders:
        if s["state"] == "unreachable":
            report.add(
                "sender_unreachable",
                f"sender {s['name']} is unreachable since {s['since']}: {s['reason']}",
                f"{due} emails are due",
                sender=s["name"],
            )
        elif usable and s["state"] in BLOCKED_STATES:
            # Mail still flows through the others: a risk to say, not a failure of the queue.
            reason = f" ({s['reason']})" if s["reason"] else ""
            report.add(
                "sender_suspended",
                f"sender {s['name']} is {s['state'].replace('_', ' ')}{reason} while {due} emails are due",
                f"mailroom senders resume {s['name']}",
                severity=WARNING,
                sender=s["name"],
            )


def _check_attempts(report: HealthReport, settings: Settings) -> None:
    rate = report.attempt_failure_rate
    if rate is None or report.attempts < settings.health_min_attempts:
        return
    if rate > settings.health_max_attempt_failure_rate:
        report.add(
            "attempt_failures",
            f"{rate:.0%} of the last {report.attempts} attempts failed in {_duration(settings.health_failure_window_seconds)},"
            f" more than {settings.health_max_attempt_failure_rate:.0%} (MAILROOM_HEALTH_MAX_ATTEMPT_FAILURE_RATE)",
        )


def _check_bounces(report: HealthReport, settings: Settings) -> None:
    """A sender whose last deliveries bounced hard or drew complaints too often: its reputation is going."""
    for r in report.reputations:
        bounces_over, complaints_over = r.over(settings)
        for kind, over, rate, limit, what, env in (
            (
                "bounce_rate",
                bounces_over,
                r.hard_bounce_rate,
                settings.health_max_bounce_rate,
                "bounced hard",
                "BOUNCE",
            ),
            (
                "complaint_rate",
                complaints_over,
                r.complaint_rate,
                settings.health_max_complaint_rate,
                "drew complaints",
                "COMPLAINT",
            ),
        ):
            if over:
                report.add(
                    kind,
                    f"sender {r.sender}: {rate or 0:.1%} of its last {r.deliveries} deliveries {what}, more than"
                    f" {limit:.1%} (MAILROOM_HEALTH_MAX_{env}_RATE)",
                    f"look for a bad list (mailroom campaigns stats), or rest it: mailroom senders pause {r.sender}",
                    sender=r.sender,
                )


def _check_quarantine(report: HealthReport, usage: QuarantineUsage, settings: Settings) -> None:
    """The bounce quarantine nearly full, or dropping messages: a warning (bounces still flow)."""
    cap = settings.quarantine_max_bytes
    if usage.bytes >= cap * QUARANTINE_WARN_SHARE:
        report.add(
            "quarantine_full",
            f"the bounce quarantine holds {usage.bytes / cap:.0%} of its {cap} bytes ({usage.messages} messages;"
            " MAILROOM_QUARANTINE_MAX_BYTES): when full, new unreadable reports are dropped unseen",
            "look at them (mailroom bounces quarantine), lower MAILROOM_QUARANTINE_RETENTION_DAYS or raise the cap",
            severity=WARNING,
        )
    if usage.dropped_today:
        report.add(
            "quarantine_dropped",
            f"the bounce quarantine dropped {usage.dropped_today} messages today (UTC): full, or a client"
            " past MAILROOM_QUARANTINE_CLIENT_DAILY_MAX",
            "see which clients: SELECT * FROM mailroom.bounce_quarantine_clients WHERE dropped > 0",
            severity=WARNING,
        )


def _check_dns(report: HealthReport, conn: psycopg.Connection[Any]) -> None:
    """What the senders' latest DNS checks found (`mailroom senders check`): DKIM that does not verify is a
    problem (every signature fails), anything else that keeps mail from landing a warning."""
    from worker.ops.dns_checks.health import dns_health

    for f in dns_health(conn):
        report.add("sender_dns", f.text, f.advice, severity=f.severity, sender=f.sender)
