"""Settings read from the environment, with the defaults an operator would expect."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs


class ConfigError(ValueError):
    """A setting is missing or malformed; the message says which and how to fix it."""


def _int(name: str, default: int, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def _recipients_limit() -> int:
    from worker.core.rules import rules

    value = _int("MAILROOM_MAX_RECIPIENTS", 50, minimum=1)
    if value > rules().max_recipients:
        raise ConfigError(f"MAILROOM_MAX_RECIPIENTS must be at most {rules().max_recipients}, got {value}")
    return value


def _float(name: str, default: float, minimum: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false (1/0, yes/no, on/off), got {raw!r}")


def default_home() -> Path:
    """Return `$MAILROOM_HOME`, or the per-user data directory when it is unset."""
    raw = os.environ.get("MAILROOM_HOME")
    if raw:
        return Path(raw).expanduser()
    return platformdirs.user_data_path("mailroom", appauthor=False)


@dataclass(frozen=True)
class Settings:
    """Everything configurable, resolved once per process."""

    home: Path = field(default_factory=default_home)
    database_url: str | None = None
    listen_database_url: str | None = None
    # MAILROOM_DATABASE_URL leads to a transaction-pooling PgBouncer: no server-side prepared statements
    transaction_pooler: bool = False
    secret_key: str | None = None
    default_locale: str = "en"
    max_subject_chars: int = 998
    max_body_bytes: int = 10 * 1024 * 1024
    # recipients of one email (To, Cc and Bcc together); the database's ceiling is content_rules.json's
    max_recipients: int = 50
    default_max_retries: int = 5
    retry_base_seconds: float = 60.0
    retry_cap_seconds: float = 6 * 3600.0
    lease_seconds: float = 300.0
    # SMTP timeouts (a sender account's own values win): connecting and greeting, each command, the body
    smtp_connect_timeout: float = 10.0
    smtp_command_timeout: float = 30.0
    smtp_data_timeout: float = 120.0
    # how long an email may wait in the queue in all (Postfix's maximal_queue_lifetime): then it fails "expired"
    queue_lifetime_seconds: float = 5 * 86400.0
    # a sender whose relay fails is left alone this long, doubling per failed probe up to the cap
    circuit_base_seconds: float = 10.0
    circuit_cap_seconds: float = 600.0
    # this many MAIL FROM refusals in a row are the sender's fault, not the emails'
    circuit_mail_refusals: int = 3
    base_url: str = "http://localhost:8025"
    # tracking and compliance: campaign email is tracked unless this is off (an email's `track` wins);
    # the mailbox that takes `List-Unsubscribe` mailto requests, if any
    track_campaigns: bool = True
    unsubscribe_mailto: str | None = None
    # retention, maintenance and health (reference 03)
    archive_dir: Path | None = None  # None: $MAILROOM_HOME/archive
    archive_after_days: int = 90  # sent email
    # the other final states, each after its own age: failed ones wait for review and `retry`,
    # expired ones (failed by the queue lifetime) likewise; cancelled and suppressed ones are done
    archive_failed_after_days: int = 30
    archive_expired_after_days: int = 30
    archive_cancelled_after_days: int = 7
    archive_suppressed_after_days: int = 7
    inbox_retention_days: int = 30
    audit_retention_days: int = 0  # audit rows older than this are pruned by maintenance; 0 keeps them all
    log_retention_months: int = 24
    partitions_ahead_months: int = 3
    maintenance_interval_seconds: float = 3600.0
    health_max_pending: int = 10_000
    health_max_oldest_pending_seconds: float = 3600.0
    health_max_idle_seconds: float = 900.0
    health_idle_grace_seconds: float = 60.0  # the idle check counts email due for longer than this
    health_failure_window_seconds: float = 900.0  # the attempt failure rate is over this recent window
    health_max_attempt_failure_rate: float = 0.25
    health_min_attempts: int = 20  # fewer attempts in the window say nothing about a rate
    # a sender's hard-bounce and complaint rates are over its last this many deliveries
    health_reputation_deliveries: int = 1000
    health_max_bounce_rate: float = 0.05
    health_max_complaint_rate: float = 0.003
    signing_key: str | None = None
    reminder_interval_seconds: float = 24 * 3600.0
    # lifecycle tokens live this long; birthday email goes out at this local time (HH:MM) in each person's zone
    token_ttl_seconds: float = 900.0
    birthday_local_time: str = "09:00"
    # where activation and recovery links point (your application); None: base_url
    lifecycle_base_url: str | None = None
    # the domain of VERP return paths (bounces+<token>@domain) whose DSNs `mailroom bounces` reads
    bounce_domain: str | None = None
    # bounce and complaint webhooks on the tracker (None: that webhook answers 404)
    webhook_secret: str | None = None
    postmark_webhook_user: str | None = None
    postmark_webhook_password: str | None = None
    sendgrid_webhook_public_key: str | None = None
    # the SNS topics whose SES notifications the tracker takes (any other AWS account can sign too)
    ses_topic_arns: tuple[str, ...] = ()
    # who gets the digest of new complaints, and how often at most (one digest per period)
    admin_emails: tuple[str, ...] = ()
    complaint_digest_seconds: float = 3600.0
    # what one client may hold of the bounce receiver (`bounces receive`): connections per client
    # network (an IPv4 address or an IPv6 /64; 0: no cap; Postfix opens up to 20 to one destination),
    # seconds between commands (and for one whole DATA), each non-mail command (NOOP, RSET, EHLO...),
    # messages per session, and how many client networks' rates are kept
    receiver_max_connections_per_client: int = 20
    receiver_timeout_seconds: float = 60.0
    receiver_max_non_mail_commands: int = 10
    receiver_max_messages_per_session: int = 20
    receiver_rate_clients: int = 10_000
    # what one client may hold of the tracker: connections per client network (0: no cap, for a proxy
    # in front that caps them), seconds a connection may go without a complete request head (slow or
    # unfinished headers, idle keep-alive) and seconds one request may take, its body included
    tracker_max_connections_per_client: int = 100
    tracker_idle_timeout_seconds: float = 15.0
    tracker_request_timeout_seconds: float = 30.0
    # the bounce quarantine: total bytes kept, messages kept per client per UTC day, days kept
    quarantine_max_bytes: int = 256 * 1024 * 1024
    quarantine_client_daily_max: int = 200
    quarantine_retention_days: int = 30

    @classmethod
    def from_env(cls) -> Settings:
        """Read every `MAILROOM_*` variable; malformed values raise `ConfigError`."""
        return cls(
            home=default_home(),
            database_url=os.environ.get("MAILROOM_DATABASE_URL") or None,
            listen_database_url=os.environ.get("MAILROOM_LISTEN_DATABASE_URL") or None,
            transaction_pooler=_bool("MAILROOM_TRANSACTION_POOLER", False),
            secret_key=os.environ.get("MAILROOM_SECRET_KEY") or None,
            default_locale=os.environ.get("MAILROOM_DEFAULT_LOCALE", "en"),
            max_subject_chars=_int("MAILROOM_MAX_SUBJECT_CHARS", 998, minimum=1),
            max_body_bytes=_int("MAILROOM_MAX_BODY_BYTES", 10 * 1024 * 1024, minimum=1),
            max_recipients=_recipients_limit(),
            default_max_retries=_int("MAILROOM_MAX_RETRIES", 5),
            retry_base_seconds=_float("MAILROOM_RETRY_BASE_SECONDS", 60.0),
            retry_cap_seconds=_float("MAILROOM_RETRY_CAP_SECONDS", 6 * 3600.0),
            lease_seconds=_float("MAILROOM_LEASE_SECONDS", 300.0, minimum=0.1),
            smtp_connect_timeout=_float("MAILROOM_SMTP_CONNECT_TIMEOUT_SECONDS", 10.0, minimum=0.1),
            smtp_command_timeout=_float("MAILROOM_SMTP_COMMAND_TIMEOUT_SECONDS", 30.0, minimum=0.1),
            smtp_data_timeout=_float("MAILROOM_SMTP_DATA_TIMEOUT_SECONDS", 120.0, minimum=0.1),
            queue_lifetime_seconds=_float("MAILROOM_QUEUE_LIFETIME_SECONDS", 5 * 86400.0, minimum=1.0),
            circuit_base_seconds=_float("MAILROOM_CIRCUIT_BASE_SECONDS", 10.0, minimum=0.01),
            circuit_cap_seconds=_float("MAILROOM_CIRCUIT_CAP_SECONDS", 600.0, minimum=0.01),
            circuit_mail_refusals=_int("MAILROOM_CIRCUIT_MAIL_REFUSALS", 3, minimum=1),
            base_url=os.environ.get("MAILROOM_BASE_URL", "http://localhost:8025").rstrip("/"),
            track_campaigns=_bool("MAILROOM_TRACK_CAMPAIGNS", True),
            unsubscribe_mailto=os.environ.get("MAILROOM_UNSUBSCRIBE_MAILTO") or None,
            archive_dir=Path(os.environ["MAILROOM_ARCHIVE_DIR"]).expanduser()
            if os.environ.get("MAILROOM_ARCHIVE_DIR")
            else None,
            archive_after_days=_int("MAILROOM_ARCHIVE_AFTER_DAYS", 90, minimum=1),
            archive_failed_after_days=_int("MAILROOM_ARCHIVE_FAILED_AFTER_DAYS", 30, minimum=1),
            archive_expired_after_days=_int("MAILROOM_ARCHIVE_EXPIRED_AFTER_DAYS", 30, minimum=1),
            archive_cancelled_after_days=_int("MAILROOM_ARCHIVE_CANCELLED_AFTER_DAYS", 7, minimum=1),
            archive_suppressed_after_days=_int("MAILROOM_ARCHIVE_SUPPRESSED_AFTER_DAYS", 7, minimum=1),
            inbox_retention_days=_int("MAILROOM_INBOX_RETENTION_DAYS", 30, minimum=1),
            audit_retention_days=_int("MAILROOM_AUDIT_RETENTION_DAYS", 0, minimum=0),
            log_retention_months=_int("MAILROOM_LOG_RETENTION_MONTHS", 24, minimum=2),
            partitions_ahead_months=_int("MAILROOM_PARTITIONS_AHEAD_MONTHS", 3, minimum=1),
            maintenance_interval_seconds=_float("MAILROOM_MAINTENANCE_INTERVAL_SECONDS", 3600.0, minimum=1.0),
            **_health_from_env(),
            signing_key=os.environ.get("MAILROOM_SIGNING_KEY") or None,
            reminder_interval_seconds=_float("MAILROOM_REMINDER_INTERVAL_SECONDS", 24 * 3600.0),
            token_ttl_seconds=_float("MAILROOM_TOKEN_TTL_SECONDS", 900.0, minimum=1.0),
            birthday_local_time=os.environ.get("MAILROOM_BIRTHDAY_LOCAL_TIME", "09:00"),
            lifecycle_base_url=(os.environ.get("MAILROOM_LIFECYCLE_BASE_URL") or "").rstrip("/") or None,
            bounce_domain=(os.environ.get("MAILROOM_BOUNCE_DOMAIN") or "").strip().lower() or None,
            **_webhooks_from_env(),
            **_doors_from_env(),
            **_quarantine_from_env(),
        )


def _health_from_env() -> dict[str, Any]:
    """The `mailroom health` thresholds (also the console's banner)."""
    return dict(
        health_max_pending=_int("MAILROOM_HEALTH_MAX_PENDING", 10_000, minimum=1),
        health_max_oldest_pending_seconds=_float("MAILROOM_HEALTH_MAX_OLDEST_PENDING_SECONDS", 3600.0),
        health_max_idle_seconds=_float("MAILROOM_HEALTH_MAX_IDLE_SECONDS", 900.0),
        health_idle_grace_seconds=_float("MAILROOM_HEALTH_IDLE_GRACE_SECONDS", 60.0),
        health_failure_window_seconds=_float("MAILROOM_HEALTH_FAILURE_WINDOW_SECONDS", 900.0, minimum=1.0),
        health_max_attempt_failure_rate=_float("MAILROOM_HEALTH_MAX_ATTEMPT_FAILURE_RATE", 0.25),
        health_min_attempts=_int("MAILROOM_HEALTH_MIN_ATTEMPTS", 20, minimum=1),
        health_reputation_deliveries=_int("MAILROOM_HEALTH_REPUTATION_DELIVERIES", 1000, minimum=1),
        health_max_bounce_rate=_float("MAILROOM_HEALTH_MAX_BOUNCE_RATE", 0.05),
        health_max_complaint_rate=_float("MAILROOM_HEALTH_MAX_COMPLAINT_RATE", 0.003),
    )


def _doors_from_env() -> dict[str, Any]:
    """What one client may hold of the bounce receiver and of the tracker."""
    return dict(
        receiver_max_connections_per_client=_int("MAILROOM_RECEIVER_MAX_CONNECTIONS_PER_CLIENT", 20),
        receiver_timeout_seconds=_float("MAILROOM_RECEIVER_TIMEOUT_SECONDS", 60.0, minimum=0.1),
        receiver_max_non_mail_commands=_int("MAILROOM_RECEIVER_MAX_NON_MAIL_COMMANDS", 10, minimum=2),
        receiver_max_messages_per_session=_int("MAILROOM_RECEIVER_MAX_MESSAGES_PER_SESSION", 20, minimum=1),
        receiver_rate_clients=_int("MAILROOM_RECEIVER_RATE_CLIENTS", 10_000, minimum=100),
        tracker_max_connections_per_client=_int("MAILROOM_TRACKER_MAX_CONNECTIONS_PER_CLIENT", 100),
        tracker_idle_timeout_seconds=_float("MAILROOM_TRACKER_IDLE_TIMEOUT_SECONDS", 15.0, minimum=0.1),
        tracker_request_timeout_seconds=_float("MAILROOM_TRACKER_REQUEST_TIMEOUT_SECONDS", 30.0, minimum=0.1),
    )


def _quarantine_from_env() -> dict[str, Any]:
    """The bounce quarantine's bounds: total bytes, messages per client per day, days kept."""
    return dict(
        quarantine_max_bytes=_int("MAILROOM_QUARANTINE_MAX_BYTES", 256 * 1024 * 1024, minimum=1024 * 1024),
        quarantine_client_daily_max=_int("MAILROOM_QUARANTINE_CLIENT_DAILY_MAX", 200, minimum=1),
        quarantine_retention_days=_int("MAILROOM_QUARANTINE_RETENTION_DAYS", 30, minimum=1),
    )


def _webhooks_from_env() -> dict[str, Any]:
    """The tracker's bounce webhooks: their secrets and the SNS topics taken."""
    return dict(
        webhook_secret=os.environ.get("MAILROOM_WEBHOOK_SECRET") or None,
        postmark_webhook_user=os.environ.get("MAILROOM_POSTMARK_WEBHOOK_USER") or None,
        postmark_webhook_password=os.environ.get("MAILROOM_POSTMARK_WEBHOOK_PASSWORD") or None,
        sendgrid_webhook_public_key=os.environ.get("MAILROOM_SENDGRID_WEBHOOK_PUBLIC_KEY") or None,
        ses_topic_arns=tuple(os.environ.get("MAILROOM_SES_TOPIC_ARNS", "").replace(",", " ").split()),
        admin_emails=_admin_emails(),
        complaint_digest_seconds=_float("MAILROOM_COMPLAINT_DIGEST_SECONDS", 3600.0, minimum=60.0),
    )


def _admin_emails() -> tuple[str, ...]:
    """MAILROOM_ADMIN_EMAILS: addresses separated by commas or spaces, each checked like a recipient."""
    from worker.core.validation import ValidationError, normalise_address

    found = []
    for address in os.environ.get("MAILROOM_ADMIN_EMAILS", "").replace(",", " ").split():
        try:
            found.append(normalise_address("MAILROOM_ADMIN_EMAILS", address))
        except ValidationError as exc:
            raise ConfigError(
                f"MAILROOM_ADMIN_EMAILS: {address!r} is not an email address ({exc.message})"
            ) from None
    return tuple(dict.fromkeys(found))
