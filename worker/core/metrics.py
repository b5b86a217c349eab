"""The process's Prometheus counters and histograms, counted where things happen, free when metrics are off.

The engine, the tracker and the bounce receiver call the `count_*`/`observe_*` functions below at
their counting points. Until `enable` runs (a command given `--metrics-listen`, or a worker process
its supervisor serves for), each is one test of a module global: prometheus-client is not even
imported. Enabled in a process whose supervisor aggregates (`PROMETHEUS_MULTIPROC_DIR` set before the
first import of prometheus-client), the values go to that directory's files and the supervisor's
listener reads them all: one scrape sees every process. Labels are bounded: a sender's name, fixed
words; never an address.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Whose fault an outcome was: the email's (its recipient or content), the sender's (its relay, its
# credentials), ours (a bug or our own command refused), or nobody's (a send, a suppression).
FAULTS = ("email", "sender", "ours", "none")
# What became of an email: the words of `mailroom_emails_total{outcome=...}`.
OUTCOMES = ("sent", "deferred", "failed", "bounced", "released", "suppressed", "expired")

# Seconds from enqueue to the relay's 2xx: from well under a second to the queue lifetime (days).
LATENCY_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400, 5 * 86400)
CLAIM_SIZE_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 200, 300, 500, 1000)
CLAIM_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
SMTP_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass(frozen=True)
class _Metrics:
    emails: Counter
    replies: Counter
    rescues: Counter
    reports: Counter
    webhooks: Counter
    latency: Histogram
    claim_size: Histogram
    claim_seconds: Histogram
    smtp_seconds: Histogram
    database_unavailable: Counter
    database_circuit: Gauge


_on: _Metrics | None = None

# Every series name the process exports (histograms add _bucket, _sum and _count; counters _total).
COUNTER_NAMES = (
    "mailroom_emails",
    "mailroom_smtp_replies",
    "mailroom_lease_rescues",
    "mailroom_reports",
    "mailroom_webhook_requests",
    "mailroom_database_unavailable",
)
# Gauges a process sets itself (the database's figures are worker.ops.metrics.GAUGE_NAMES).
PROCESS_GAUGE_NAMES = ("mailroom_database_circuit_open",)
HISTOGRAM_NAMES = (
    "mailroom_enqueue_to_accepted_seconds",
    "mailroom_claim_size_emails",
    "mailroom_claim_to_finish_seconds",
    "mailroom_smtp_transaction_seconds",
)


def enable(registry: CollectorRegistry | None) -> None:
    """Create the metrics (in `registry`; None in a process whose values a supervisor aggregates)."""
    global _on
    from prometheus_client import Counter

    kw: dict[str, Any] = {"registry": registry}
    emails = Counter(
        "mailroom_emails",
        "Emails by what became of them (sent, deferred, failed, bounced, released, suppressed, expired), "
        "their sender and whose fault it was (email, sender, ours, none)",
        ["sender", "outcome", "fault"],
        **kw,
    )
    replies = Counter(
        "mailroom_smtp_replies",
        "SMTP replies that ended an attempt, by sender and class (2xx, 4xx, 5xx; none: no reply came)",
        ["sender", "class"],
        **kw,
    )
    rescues = Counter(
        "mailroom_lease_rescues",
        "Emails returned to the queue because the claim holding them outlived its lease",
        **kw,
    )
    reports = Counter(
        "mailroom_reports",
        "Bounce and complaint reports received, by kind (hard, soft, complaint, none) and outcome "
        "(recorded, duplicate, ignored, quarantined, error)",
        ["kind", "outcome"],
        **kw,
    )
    webhooks = Counter(
        "mailroom_webhook_requests",
        "Provider webhook requests, by provider and result (accepted, denied, not_configured, refused, error)",
        ["provider", "result"],
        **kw,
    )
    _on = _Metrics(emails, replies, rescues, reports, webhooks, *_histograms(kw), *_database(kw))


def _database(kw: dict[str, Any]) -> tuple[Counter, Gauge]:
    from prometheus_client import Counter, Gauge

    return (
        Counter(
            "mailroom_database_unavailable",
            "Database operations that found the database unavailable, by process role and reason "
            "(unreachable, read-only, shutting down, overloaded, interrupted): a failover shows here",
            ["role", "reason"],
            **kw,
        ),
        Gauge(
            "mailroom_database_circuit_open",
            "1 while the process has stopped trying the database for a while after repeated failures",
            ["role"],
            multiprocess_mode="livemax",
            **kw,
        ),
    )


def _histograms(kw: dict[str, Any]) -> tuple[Histogram, Histogram, Histogram, Histogram]:
    from prometheus_client import Histogram

    return (
        Histogram(
            "mailroom_enqueue_to_accepted_seconds",
            "Seconds from an email's enqueue to the relay's 2xx at the end of DATA",
            ["sender"],
            buckets=LATENCY_BUCKETS,
            **kw,
        ),
        Histogram(
            "mailroom_claim_size_emails",
            "Emails per claim (only claims that got email)",
            buckets=CLAIM_SIZE_BUCKETS,
            **kw,
        ),
        Histogram(
            "mailroom_claim_to_finish_seconds",
            "Seconds from a claim to the end of its bookkeeping",
            buckets=CLAIM_SECONDS_BUCKETS,
            **kw,
        ),
        Histogram(
            "mailroom_smtp_transaction_seconds",
            "Seconds of one SMTP transaction (MAIL FROM to the reply to the end of DATA), by sender",
            ["sender"],
            buckets=SMTP_SECONDS_BUCKETS,
            **kw,
        ),
    )


def child_gone(directory: str, pid: int) -> None:
    """A worker process under the supervisor ended: its live gauges (its database circuit's among them)
    no longer count; its counters stay in the sums."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]


def enable_for_supervisor(directory: str) -> None:
    """Count into `directory`, which the supervising process's listener reads (prometheus-client's
    multiprocess mode), and serve nothing here."""
    import os

    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    from prometheus_client import values

    # The value class is chosen when prometheus-client is first imported: choose again now the
    # directory is known, in case something imported it earlier.
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    enable(None)


def disable() -> None:
    """Stop counting (tests; a command that enabled metrics and ends)."""
    global _on
    _on = None


def enabled() -> bool:
    """Whether this process counts."""
    return _on is not None


def reply_class(code: int | None) -> str:
    """2xx, 4xx or 5xx; `none` when no reply came (timeout, dropped connection, a build error)."""
    if code is None or not 200 <= code <= 599:
        return "none"
    return f"{code // 100}xx"


def count_email(sender: str, outcome: str, fault: str, n: int = 1) -> None:
    """`n` emails came to `outcome` through `sender`, by `fault`."""
    if _on is not None and n:
        _on.emails.labels(sender, outcome, fault).inc(n)


def count_attempt(sender: str, outcome: str, fault: str, code: int | None, seconds: float) -> None:
    """One attempt: the email's outcome, the reply's class, the transaction's duration."""
    if _on is not None:
        _on.emails.labels(sender, outcome, fault).inc()
        _on.replies.labels(sender, reply_class(code)).inc()
        if code is not None:  # a transaction that never reached the relay has no duration worth a bucket
            _on.smtp_seconds.labels(sender).observe(seconds)


def observe_accepted(sender: str, seconds: float) -> None:
    """An email the relay accepted `seconds` after it was enqueued."""
    if _on is not None:
        _on.latency.labels(sender).observe(max(seconds, 0.0))


def observe_claim(size: int) -> None:
    """A claim that got `size` emails."""
    if _on is not None:
        _on.claim_size.observe(size)


def observe_claim_finished(seconds: float) -> None:
    """A claim's bookkeeping ended `seconds` after it was claimed."""
    if _on is not None:
        _on.claim_seconds.observe(max(seconds, 0.0))


def count_rescued(n: int) -> None:
    """`n` emails returned to the queue by lease rescue."""
    if _on is not None and n:
        _on.rescues.inc(n)


def count_report(kind: str, outcome: str) -> None:
    """One bounce or complaint report received (by the bounce receiver)."""
    if _on is not None:
        _on.reports.labels(kind, outcome).inc()


def count_database_unavailable(role: str, reason: str) -> None:
    """One database operation of a `role` process found the database unavailable for `reason`."""
    if _on is not None:
        _on.database_unavailable.labels(role, reason).inc()


def set_database_circuit(role: str, is_open: bool) -> None:
    """The database circuit of a `role` process opened or closed."""
    if _on is not None:
        _on.database_circuit.labels(role).set(int(is_open))


def count_webhook(provider: str, result: str) -> None:
    """One provider webhook request and its result."""
    if _on is not None:
        _on.webhooks.labels(provider, result).inc()
