"""Settings read from the environment, with the defaults an operator would expect.

Each `MAILROOM_*` variable is declared once in `DECLARED`: the field of `Settings` it fills (whose
default is the setting's default), how it is read and checked, and what it means. `Settings.from_env`
reads through that declaration, and the documentation's settings table is rendered from it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
    import platformdirs

    return platformdirs.user_data_path("mailroom", appauthor=False)


@dataclass(frozen=True)
class Settings:
    """Everything configurable, resolved once per process; each field's meaning is in `DECLARED`."""

    home: Path = field(default_factory=default_home)
    database_url: str | None = None
    listen_database_url: str | None = None
    transaction_pooler: bool = False
    secret_key: str | None = None
    default_locale: str = "en"
    max_subject_chars: int = 998
    max_body_bytes: int = 10 * 1024 * 1024
    max_recipients: int = 50
    max_attachment_bytes: int = 10 * 1024 * 1024
    max_attachments_bytes: int = 15 * 1024 * 1024
    default_max_retries: int = 5
    retry_base_seconds: float = 60.0
    retry_cap_seconds: float = 6 * 3600.0
    lease_seconds: float = 300.0
    journal_durable: bool = True
    smtp_connect_timeout: float = 10.0
    smtp_command_timeout: float = 30.0
    smtp_data_timeout: float = 120.0
    gmail_api_url: str = "https://gmail.googleapis.com"
    queue_lifetime_seconds: float = 5 * 86400.0
    circuit_base_seconds: float = 10.0
    circuit_cap_seconds: float = 600.0
    circuit_mail_refusals: int = 3
    webhook_timeout_seconds: float = 10.0
    webhook_retry_base_seconds: float = 5.0
    webhook_retry_cap_seconds: float = 8 * 3600.0
    webhook_retry_hours: float = 72.0
    webhook_in_flight: int = 32
    webhook_retention_days: int = 30
    base_url: str = "http://localhost:8025"
    track_campaigns: bool = True
    unsubscribe_mailto: str | None = None
    postal_address: str | None = None
    postal_footer_transactional: bool = False
    archive_dir: Path | None = None  # None: $MAILROOM_HOME/archive
    archive_after_days: int = 90
    archive_failed_after_days: int = 30
    archive_expired_after_days: int = 30
    archive_cancelled_after_days: int = 7
    archive_suppressed_after_days: int = 7
    archive_retention_days: int = 2557
    inbox_retention_days: int = 30
    audit_retention_days: int = 0
    log_retention_months: int = 24
    partitions_ahead_months: int = 3
    maintenance_interval_seconds: float = 3600.0
    health_max_pending: int = 10_000
    health_max_oldest_pending_seconds: float = 3600.0
    health_max_idle_seconds: float = 900.0
    health_idle_grace_seconds: float = 60.0
    health_failure_window_seconds: float = 900.0
    health_max_attempt_failure_rate: float = 0.25
    health_min_attempts: int = 20
    health_reputation_deliveries: int = 1000
    health_max_bounce_rate: float = 0.05
    health_max_complaint_rate: float = 0.003
    signing_key: str | None = None
    reminder_interval_seconds: float = 24 * 3600.0
    signing_link_days: float = 30.0
    token_ttl_seconds: float = 900.0
    birthday_local_time: str = "09:00"
    lifecycle_base_url: str | None = None  # None: base_url
    bounce_domain: str | None = None
    webhook_secret: str | None = None
    postmark_webhook_user: str | None = None
    postmark_webhook_password: str | None = None
    sendgrid_webhook_public_key: str | None = None
    ses_topic_arns: tuple[str, ...] = ()
    admin_emails: tuple[str, ...] = ()
    complaint_digest_seconds: float = 3600.0
    receiver_max_connections_per_client: int = 20
    receiver_timeout_seconds: float = 60.0
    receiver_max_non_mail_commands: int = 10
    receiver_max_messages_per_session: int = 20
    receiver_rate_clients: int = 10_000
    tracker_max_connections_per_client: int = 100
    tracker_idle_timeout_seconds: float = 15.0
    tracker_request_timeout_seconds: float = 30.0
    quarantine_max_bytes: int = 256 * 1024 * 1024
    quarantine_client_daily_max: int = 200
    quarantine_retention_days: int = 30
    dmarc_retention_days: int = 400
    dmarc_max_records: int = 1_000_000
    dmarc_org_daily_max: int = 50
    dns_servers: tuple[str, ...] = ()  # host[:port] each; empty: the system's resolvers
    dns_timeout_seconds: float = 2.0
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = field(default=None, repr=False)  # a secret: never in a repr or a log
    oidc_client_secret_file: Path | None = None
    oidc_required: bool = False

    @classmethod
    def from_env(cls) -> Settings:
        """Read every `MAILROOM_*` variable; malformed values raise `ConfigError`."""
        return cls(**{s.field: s.read(s) for s in DECLARED if s.field is not None})


@dataclass(frozen=True)
class Setting:
    """One `MAILROOM_*` variable: the `Settings` field it fills, how it is read, what it means."""

    env: str
    field: str | None  # None: read where it is used (the log format, before any settings exist)
    meaning: str
    read: Callable[[Setting], Any]
    minimum: float = 0
    shown: str | None = None  # the default as the documentation words it, when the value says less
    fallback: Any = None  # the default of a variable that fills no field

    @property
    def default(self) -> Any:
        """The value used when the variable is unset or empty: the `Settings` field's default."""
        if self.field is None:
            return self.fallback
        spec = Settings.__dataclass_fields__[self.field]
        if spec.default_factory is not dataclasses.MISSING:
            return spec.default_factory()
        return spec.default


def _whole(s: Setting) -> int:
    return _int(s.env, s.default, int(s.minimum))


def _number(s: Setting) -> float:
    return _float(s.env, s.default, float(s.minimum))


def _flag(s: Setting) -> bool:
    return _bool(s.env, s.default)


def _text(s: Setting) -> str:
    """The value as given (an empty value included), else the default."""
    return os.environ.get(s.env, str(s.default))


def _optional(s: Setting) -> str | None:
    return os.environ.get(s.env) or None


def _url(s: Setting) -> str:
    return os.environ.get(s.env, str(s.default)).rstrip("/")


def _optional_url(s: Setting) -> str | None:
    return (os.environ.get(s.env) or "").rstrip("/") or None


def _domain(s: Setting) -> str | None:
    return (os.environ.get(s.env) or "").strip().lower() or None


def _path(s: Setting) -> Path | None:
    raw = os.environ.get(s.env)
    return Path(raw).expanduser() if raw else None


def _words(s: Setting) -> tuple[str, ...]:
    """Values separated by commas or spaces."""
    return tuple(os.environ.get(s.env, "").replace(",", " ").split())


def _home(s: Setting) -> Path:
    return default_home()


def _recipients_limit(s: Setting) -> int:
    from worker.core.rules import rules

    value = _whole(s)
    if value > rules().max_recipients:
        raise ConfigError(f"{s.env} must be at most {rules().max_recipients}, got {value}")
    return value


# The database refuses more than this in one file and in one email's files (revision 0013).
ATTACHMENT_CEILING = 25 * 1024 * 1024


def _attachment_limit(s: Setting) -> int:
    value = _whole(s)
    if value > ATTACHMENT_CEILING:
        raise ConfigError(f"{s.env} must be at most {ATTACHMENT_CEILING} (25 MiB), got {value}")
    return value


def _dns_servers(s: Setting) -> tuple[str, ...]:
    """Resolvers separated by commas or spaces, each an IP address with an optional port."""
    from worker.core.dns_servers import format_dns_server, parse_dns_server

    try:
        return tuple(format_dns_server(*parse_dns_server(entry)) for entry in _words(s))
    except ValueError as exc:
        raise ConfigError(f"{s.env}: {exc}") from None


def _admin_emails(s: Setting) -> tuple[str, ...]:
    """Addresses separated by commas or spaces, each checked like a recipient."""
    found = []
    for address in _words(s):
        from worker.core.validation import ValidationError, normalise_address

        try:
            found.append(normalise_address(s.env, address))
        except ValidationError as exc:
            raise ConfigError(f"{s.env}: {address!r} is not an email address ({exc.message})") from None
    return tuple(dict.fromkeys(found))


_S = Setting
# In the order they are read: the first malformed one is the one reported.
DECLARED: tuple[Setting, ...] = (
    # where it runs
    _S("MAILROOM_HOME", "home", "embedded server, secret key file, archives", _home, shown="per-user data directory"),
    _S("MAILROOM_DATABASE_URL", "database_url", "PostgreSQL to use (any libpq URL)", _optional,
       shown="the embedded server"),
    _S("MAILROOM_LISTEN_DATABASE_URL", "listen_database_url",
       "a direct connection to PostgreSQL for LISTEN (and, behind a pooler, maintenance)", _optional,
       shown="`MAILROOM_DATABASE_URL`"),
    _S("MAILROOM_TRANSACTION_POOLER", "transaction_pooler", "`MAILROOM_DATABASE_URL` leads to a "
       "transaction-pooling PgBouncer: no prepared statements, no startup options", _flag),
    _S("MAILROOM_SECRET_KEY", "secret_key", "key for secrets at rest, and for the MACs of return paths, "
       "Message-IDs and per-recipient links", _optional,
       shown="none: on the embedded database `$MAILROOM_HOME/secret.key` (mode 0600), made at first need"),
    _S("MAILROOM_LOG_FORMAT", None, "`text` (time, level, logger, message) or `json` (one object a line, "
       "with each event's fields)", _text, fallback="text"),
    _S("MAILROOM_TRACING", None, "send OpenTelemetry traces (the `[otel]` extra) to the `OTEL_*` exporter: "
       "on by itself when `OTEL_TRACES_EXPORTER` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set; false turns it off",
       _flag, fallback=False),
    # what an email may be
    _S("MAILROOM_DEFAULT_LOCALE", "default_locale",
       "locale a template falls back to when the email's locale has none", _text),
    _S("MAILROOM_MAX_SUBJECT_CHARS", "max_subject_chars", "longest subject enqueued", _whole, 1),
    _S("MAILROOM_MAX_BODY_BYTES", "max_body_bytes", "largest text or HTML body enqueued", _whole, 1),
    _S("MAILROOM_MAX_ATTACHMENT_BYTES", "max_attachment_bytes",
       "largest file attached to an email (at most 25 MiB, the database's ceiling)", _attachment_limit, 1),
    _S("MAILROOM_MAX_ATTACHMENTS_BYTES", "max_attachments_bytes",
       "all the files of one email together, before base64 (at most 25 MiB, the database's ceiling)",
       _attachment_limit, 1),
    _S("MAILROOM_MAX_RECIPIENTS", "max_recipients", "recipients of one email, To, Cc and Bcc together "
       "(at most 100, the database's ceiling)", _recipients_limit, 1),
    # delivery
    _S("MAILROOM_MAX_RETRIES", "default_max_retries", "default retry budget of an email", _whole),
    _S("MAILROOM_RETRY_BASE_SECONDS", "retry_base_seconds",
       "first backoff after a transient failure, doubling per attempt", _number),
    _S("MAILROOM_RETRY_CAP_SECONDS", "retry_cap_seconds", "longest backoff between attempts", _number),
    _S("MAILROOM_LEASE_SECONDS", "lease_seconds", "a claim's lease; a dead worker's email returns after it",
       _number, 0.1),
    _S("MAILROOM_JOURNAL_DURABLE", "journal_durable", "what the relay accepted is committed as the server's "
       "`synchronous_commit` says (on a synchronous standby too) before the next message goes out, so a "
       "failover never sends it again; false commits it asynchronously (docs/high-availability.md says "
       "what that costs and saves)", _flag),
    _S("MAILROOM_SMTP_CONNECT_TIMEOUT_SECONDS", "smtp_connect_timeout",
       "SMTP timeout for TCP, greeting, EHLO, TLS and AUTH (a sender account's own value wins)", _number, 0.1),
    _S("MAILROOM_SMTP_COMMAND_TIMEOUT_SECONDS", "smtp_command_timeout",
       "SMTP timeout for MAIL, RCPT and DATA (a sender account's own value wins)", _number, 0.1),
    _S("MAILROOM_SMTP_DATA_TIMEOUT_SECONDS", "smtp_data_timeout",
       "SMTP timeout for the body and its reply (a sender account's own value wins)", _number, 0.1),
    _S("MAILROOM_GMAIL_API_URL", "gmail_api_url", "where Gmail API sender accounts send "
       "(`POST URL/gmail/v1/users/me/messages/send`): https, or plain http to 127.0.0.1 only", _url),
    _S("MAILROOM_QUEUE_LIFETIME_SECONDS", "queue_lifetime_seconds",
       "an email still unsent after this fails with `expired`", _number, 1.0, shown="432000 (5 days)"),
    _S("MAILROOM_CIRCUIT_BASE_SECONDS", "circuit_base_seconds", "how long an unreachable sender is left "
       "alone before its next probe, doubling per failed probe", _number, 0.01),
    _S("MAILROOM_CIRCUIT_CAP_SECONDS", "circuit_cap_seconds", "the longest a sender's circuit stays open "
       "before a probe", _number, 0.01),
    _S("MAILROOM_CIRCUIT_MAIL_REFUSALS", "circuit_mail_refusals",
       "MAIL FROM refusals in a row that open a sender's circuit", _whole, 1),
    # events back to the application (webhook endpoints: `mailroom webhooks`)
    _S("MAILROOM_WEBHOOK_TIMEOUT_SECONDS", "webhook_timeout_seconds",
       "one POST to a webhook endpoint, connection to answer; longer is a failed attempt", _number, 0.1),
    _S("MAILROOM_WEBHOOK_RETRY_BASE_SECONDS", "webhook_retry_base_seconds",
       "first wait after a failed webhook attempt, six times longer per attempt", _number, 0.01),
    _S("MAILROOM_WEBHOOK_RETRY_CAP_SECONDS", "webhook_retry_cap_seconds",
       "longest wait between a webhook's attempts", _number, 0.01),
    _S("MAILROOM_WEBHOOK_RETRY_HOURS", "webhook_retry_hours",
       "a webhook event is retried this long after its first attempt, then given up (`dead`)", _number, 24.0),
    _S("MAILROOM_WEBHOOK_IN_FLIGHT", "webhook_in_flight",
       "POSTs in flight to one endpoint at once, per worker process", _whole, 1),
    _S("MAILROOM_WEBHOOK_RETENTION_DAYS", "webhook_retention_days", "maintenance deletes webhook events "
       "older than this that no endpoint still waits for", _whole, 1),
    # tracking
    _S("MAILROOM_BASE_URL", "base_url", "public address of `mailroom tracker` written into emails "
       "(pixel, links, List-Unsubscribe); use https in production", _url),
    _S("MAILROOM_TRACK_CAMPAIGNS", "track_campaigns",
       "track opens and clicks of campaign email unless the email says `track: false`", _flag),
    _S("MAILROOM_UNSUBSCRIBE_MAILTO", "unsubscribe_mailto", "mailbox added to `List-Unsubscribe` as a mailto "
       "(`?subject=unsubscribe TOKEN`); Mailroom does not read that mailbox", _optional),
    _S("MAILROOM_POSTAL_ADDRESS", "postal_address", "physical postal address in the footer of campaign "
       "email when neither the campaign nor the sender account has one; without any, campaign email "
       "is refused", _optional),
    _S("MAILROOM_POSTAL_FOOTER_TRANSACTIONAL", "postal_footer_transactional",
       "also put the postal address footer on transactional email", _flag),
    # retention and maintenance
    _S("MAILROOM_ARCHIVE_DIR", "archive_dir", "where archived email of every final state is written "
       "(files mode 0600)", _path, shown="`$MAILROOM_HOME/archive`"),
    _S("MAILROOM_ARCHIVE_AFTER_DAYS", "archive_after_days",
       "sent email older than this (by `sent_at`) is archived and deleted from the queue", _whole, 1),
    _S("MAILROOM_ARCHIVE_FAILED_AFTER_DAYS", "archive_failed_after_days",
       "failed email (by `finished_at`), left this long for review and `mailroom retry`", _whole, 1),
    _S("MAILROOM_ARCHIVE_EXPIRED_AFTER_DAYS", "archive_expired_after_days",
       "email failed by the queue lifetime", _whole, 1),
    _S("MAILROOM_ARCHIVE_CANCELLED_AFTER_DAYS", "archive_cancelled_after_days", "cancelled email", _whole, 1),
    _S("MAILROOM_ARCHIVE_SUPPRESSED_AFTER_DAYS", "archive_suppressed_after_days",
       "suppressed email (unsubscribed or bounced address)", _whole, 1),
    _S("MAILROOM_ARCHIVE_RETENTION_DAYS", "archive_retention_days", "archive files (email of every final "
       "state, send logs) are overwritten and deleted once their period ended this many days ago (7 years)",
       _whole, 1),
    _S("MAILROOM_INBOX_RETENTION_DAYS", "inbox_retention_days",
       "inbox rows (the de-duplication window of order events) kept this long", _whole, 1),
    _S("MAILROOM_AUDIT_RETENTION_DAYS", "audit_retention_days", "maintenance prunes audit rows older than "
       "this through `mailroom.audit_prune` (the chain still verifies); 0 keeps them for ever", _whole),
    _S("MAILROOM_LOG_RETENTION_MONTHS", "log_retention_months", "`send_logs`, `open_events` and "
       "`click_events` partitions are dropped once they ended this many months ago", _whole, 2),
    _S("MAILROOM_PARTITIONS_AHEAD_MONTHS", "partitions_ahead_months",
       "partitions are created this many months ahead", _whole, 1),
    _S("MAILROOM_MAINTENANCE_INTERVAL_SECONDS", "maintenance_interval_seconds",
       "how often one of the workers runs maintenance", _number, 1.0),
    # health
    _S("MAILROOM_HEALTH_MAX_PENDING", "health_max_pending",
       "`mailroom health` fails past this many emails due or being sent", _whole, 1),
    _S("MAILROOM_HEALTH_MAX_OLDEST_PENDING_SECONDS", "health_max_oldest_pending_seconds",
       "... or when the oldest due email waited longer than this", _number),
    _S("MAILROOM_HEALTH_MAX_IDLE_SECONDS", "health_max_idle_seconds",
       "... or when nothing was sent for this long while email has been due past the grace", _number),
    _S("MAILROOM_HEALTH_IDLE_GRACE_SECONDS", "health_idle_grace_seconds", "the idle, no-sender and no-worker "
       "checks ignore email due (or being sent) for less than this, so a fresh email after a quiet spell is "
       "not an alarm", _number),
    _S("MAILROOM_HEALTH_FAILURE_WINDOW_SECONDS", "health_failure_window_seconds",
       "the recent window the attempt failure rate is measured over", _number, 1.0),
    _S("MAILROOM_HEALTH_MAX_ATTEMPT_FAILURE_RATE", "health_max_attempt_failure_rate",
       "`mailroom health` fails when more than this share of the window's attempts failed", _number),
    _S("MAILROOM_HEALTH_MIN_ATTEMPTS", "health_min_attempts", "fewer attempts (or a sender's deliveries) "
       "than this say nothing about a rate", _whole, 1),
    _S("MAILROOM_HEALTH_REPUTATION_DELIVERIES", "health_reputation_deliveries",
       "a sender's hard-bounce and complaint rates are over its last this many deliveries (senders with fewer "
       "than `MAILROOM_HEALTH_MIN_ATTEMPTS` deliveries are not judged)", _whole, 1),
    _S("MAILROOM_HEALTH_MAX_BOUNCE_RATE", "health_max_bounce_rate",
       "`mailroom health` and the console's banner fail when a sender's hard-bounce rate passes this", _number),
    _S("MAILROOM_HEALTH_MAX_COMPLAINT_RATE", "health_max_complaint_rate",
       "... and when its complaint rate passes this", _number),
    # signatures and lifecycle
    _S("MAILROOM_SIGNING_KEY", "signing_key", "Ed25519 key that signs document acknowledgements: 32 bytes "
       "in base64, the same format as the key file", _optional,
       shown="none (`$MAILROOM_HOME/signing.key`, created on first signature, mode 0600)"),
    _S("MAILROOM_REMINDER_INTERVAL_SECONDS", "reminder_interval_seconds", "`docs remind` refuses to remind a "
       "signer again sooner (failed or cancelled reminders do not count)", _number),
    _S("MAILROOM_SIGNING_LINK_DAYS", "signing_link_days", "days a signer's link to the signing page stays "
       "valid after it is made (each reminder carries a fresh one)", _number, 0.01),
    _S("MAILROOM_TOKEN_TTL_SECONDS", "token_ttl_seconds", "lifetime of activation and recovery tokens",
       _number, 1.0),
    _S("MAILROOM_BIRTHDAY_LOCAL_TIME", "birthday_local_time",
       "local time of day (HH:MM) birthday email is due in each person's zone; people inserted by plain SQL "
       "get the database's `mailroom.birthday_time` setting, else 09:00", _text),
    _S("MAILROOM_LIFECYCLE_BASE_URL", "lifecycle_base_url", "your application's address: links are "
       "`BASE/activate?token=HEX` and `BASE/recover?token=HEX`", _optional_url, shown="`MAILROOM_BASE_URL`"),
    # bounces and complaints
    _S("MAILROOM_BOUNCE_DOMAIN", "bounce_domain", "the domain of every email's VERP return path (a sender "
       "account's own wins); without either, MAIL FROM is the sender account's address", _domain),
    _S("MAILROOM_WEBHOOK_SECRET", "webhook_secret",
       "HMAC secret of the generic bounce webhook (`/webhooks/bounces`); unset, the route answers 404", _optional),
    _S("MAILROOM_POSTMARK_WEBHOOK_USER", "postmark_webhook_user",
       "basic-auth user of `/webhooks/postmark`", _optional),
    _S("MAILROOM_POSTMARK_WEBHOOK_PASSWORD", "postmark_webhook_password",
       "basic-auth password of `/webhooks/postmark`", _optional),
    _S("MAILROOM_SENDGRID_WEBHOOK_PUBLIC_KEY", "sendgrid_webhook_public_key", "the Signed Event Webhook's "
       "verification key (base64 DER or PEM) for `/webhooks/sendgrid`", _optional),
    _S("MAILROOM_SES_TOPIC_ARNS", "ses_topic_arns",
       "SNS topics (comma-separated) whose SES notifications `/webhooks/ses` takes", _words),
    _S("MAILROOM_ADMIN_EMAILS", "admin_emails",
       "who gets the digest of new complaints (comma-separated)", _admin_emails),
    _S("MAILROOM_COMPLAINT_DIGEST_SECONDS", "complaint_digest_seconds",
       "the complaint digest's period: one digest per period at most, none without complaints", _number, 60.0),
    # what one client may hold of the bounce receiver and of the tracker
    _S("MAILROOM_RECEIVER_MAX_CONNECTIONS_PER_CLIENT", "receiver_max_connections_per_client",
       "bounce receiver connections per client network (an IPv4 address or IPv6 /64); 0: no cap", _whole),
    _S("MAILROOM_RECEIVER_TIMEOUT_SECONDS", "receiver_timeout_seconds",
       "the bounce receiver closes a session idle this long (and one DATA taking longer)", _number, 0.1),
    _S("MAILROOM_RECEIVER_MAX_NON_MAIL_COMMANDS", "receiver_max_non_mail_commands",
       "NOOP, RSET, EHLO, ... a bounce receiver session may send", _whole, 2),
    _S("MAILROOM_RECEIVER_MAX_MESSAGES_PER_SESSION", "receiver_max_messages_per_session",
       "messages one bounce receiver session may send", _whole, 1),
    _S("MAILROOM_RECEIVER_RATE_CLIENTS", "receiver_rate_clients",
       "client networks whose rate the bounce receiver keeps", _whole, 100),
    _S("MAILROOM_TRACKER_MAX_CONNECTIONS_PER_CLIENT", "tracker_max_connections_per_client",
       "tracker connections per client network; 0: no cap (a proxy in front caps them)", _whole),
    _S("MAILROOM_TRACKER_IDLE_TIMEOUT_SECONDS", "tracker_idle_timeout_seconds",
       "the tracker closes a connection without a complete request head for this long", _number, 0.1),
    _S("MAILROOM_TRACKER_REQUEST_TIMEOUT_SECONDS", "tracker_request_timeout_seconds",
       "the tracker answers 408 to a request not done within this, body included", _number, 0.1),
    # the bounce quarantine
    _S("MAILROOM_QUARANTINE_MAX_BYTES", "quarantine_max_bytes", "bytes the bounce quarantine keeps in all",
       _whole, 1024 * 1024, shown="268435456 (256 MiB)"),
    _S("MAILROOM_QUARANTINE_CLIENT_DAILY_MAX", "quarantine_client_daily_max",
       "messages quarantined per client per UTC day", _whole, 1),
    _S("MAILROOM_QUARANTINE_RETENTION_DAYS", "quarantine_retention_days",
       "maintenance deletes quarantined messages older than this", _whole, 1),
    _S("MAILROOM_DMARC_RETENTION_DAYS", "dmarc_retention_days", "maintenance deletes DMARC aggregate "
       "reports (and their records) stored longer ago than this", _whole, 1),
    _S("MAILROOM_DMARC_MAX_RECORDS", "dmarc_max_records", "records the stored DMARC reports hold in all; past "
       "it a report is refused", _whole, 1),
    _S("MAILROOM_DMARC_ORG_DAILY_MAX", "dmarc_org_daily_max", "DMARC reports stored per reporting "
       "organisation (as the report names it) per UTC day; past it a report is refused", _whole, 1),
    # DNS checks of sender domains (`mailroom senders check`)
    _S("MAILROOM_DNS_SERVERS", "dns_servers", "resolvers the DNS checks of sender domains ask, comma-separated "
       "`address[:port]` (IPv6 as `[address]:port`)", _dns_servers, shown="the system's resolvers"),
    _S("MAILROOM_DNS_TIMEOUT_SECONDS", "dns_timeout_seconds",
       "how long a DNS check waits for one answer before it says DNS was unreachable", _number, 0.1),
    # OpenID Connect login on the signing page (worker.tracking.oidc)
    _S("MAILROOM_OIDC_ISSUER", "oidc_issuer", "OpenID Connect issuer signers may log in with (its "
       "`/.well-known/openid-configuration` is read); unset, no login is offered", _optional_url),
    _S("MAILROOM_OIDC_CLIENT_ID", "oidc_client_id", "the client id registered at the issuer, with the "
       "redirect URI `MAILROOM_BASE_URL/oidc/callback`", _optional),
    _S("MAILROOM_OIDC_CLIENT_SECRET", "oidc_client_secret", "the client's secret (never logged); or "
       "`MAILROOM_OIDC_CLIENT_SECRET_FILE`", _optional),
    _S("MAILROOM_OIDC_CLIENT_SECRET_FILE", "oidc_client_secret_file",
       "a file holding the client's secret, read at start (keep it mode 0600)", _path),
    _S("MAILROOM_OIDC_REQUIRED", "oidc_required", "every signer logs in with the issuer before signing "
       "(a document may require it on its own)", _flag),
)  # fmt: skip
