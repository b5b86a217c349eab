"""Declared schema of revision 0001 (migrations/versions/0001_initial.sql), for Alembic's autogenerate."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Date,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import BYTEA, INET, JSONB, UUID

SCHEMA = "mailroom"
metadata = MetaData(schema=SCHEMA)

# Constraint names are the ones PostgreSQL chose for the unnamed constraints of the SQL file,
# so later revisions can refer to them by name. Partitions of send_logs, open_events and
# click_events are created by mailroom.ensure_month_partitions(), not declared here.

NOW = text("now()")

# ---------------------------------------------------------------------------
# Delivery core (reference 05)
# ---------------------------------------------------------------------------

sender_accounts = Table(
    "sender_accounts",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("name", Text, nullable=False),
    Column("from_email", Text, nullable=False),
    Column("from_name", Text),
    Column("smtp_host", Text, nullable=False),
    Column("smtp_port", Integer, nullable=False),
    Column("smtp_security", Text, nullable=False, server_default=text("'starttls'")),
    Column("smtp_username", Text),
    Column("smtp_password_encrypted", BYTEA),
    Column("daily_limit", Integer, nullable=False, server_default=text("2000")),
    Column("warmup_stage", Integer, nullable=False, server_default=text("0")),
    Column("warmup_limit", Integer),
    # revision 0004: the UTC day reserve_quota last considered advancing the warm-up stage
    Column("warmup_checked_on", Date),
    Column("send_delay_ms", Integer, nullable=False, server_default=text("0")),
    Column("max_connections", Integer, nullable=False, server_default=text("4")),
    Column("status", Text, nullable=False, server_default=text("'active'")),
    Column("status_reason", Text),
    Column("status_changed_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("limit_reached_on", Date),
    Column("dkim_domain", Text),
    Column("dkim_selector", Text),
    Column("dkim_private_key_encrypted", BYTEA),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("last_used_at", DateTime(timezone=True)),
    Column("version", Integer, nullable=False, server_default=text("1")),
    PrimaryKeyConstraint("id", name="sender_accounts_pkey"),
    UniqueConstraint("name", name="sender_accounts_name_key"),
    CheckConstraint("name ~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$'", name="sender_accounts_name_check"),
    CheckConstraint("length(from_email) BETWEEN 3 AND 254", name="sender_accounts_from_email_check"),
    CheckConstraint(r"from_name !~ '[\x00-\x1f\x7f]'", name="sender_accounts_from_name_check"),
    CheckConstraint("length(smtp_host) BETWEEN 1 AND 255", name="sender_accounts_smtp_host_check"),
    CheckConstraint("smtp_port BETWEEN 1 AND 65535", name="sender_accounts_smtp_port_check"),
    CheckConstraint(
        "smtp_security IN ('none', 'starttls', 'tls')", name="sender_accounts_smtp_security_check"
    ),
    CheckConstraint("daily_limit >= 0", name="sender_accounts_daily_limit_check"),
    CheckConstraint("warmup_stage BETWEEN 0 AND 5", name="sender_accounts_warmup_stage_check"),
    CheckConstraint("warmup_limit >= 0", name="sender_accounts_warmup_limit_check"),
    CheckConstraint("send_delay_ms BETWEEN 0 AND 3600000", name="sender_accounts_send_delay_ms_check"),
    CheckConstraint("max_connections BETWEEN 1 AND 100", name="sender_accounts_max_connections_check"),
    CheckConstraint(
        "status IN ('active', 'paused', 'suspended', 'warming_up', 'paused_limit_reached')",
        name="sender_accounts_status_check",
    ),
    CheckConstraint("warmup_stage = 0 OR warmup_limit IS NOT NULL", name="sender_accounts_check"),
    CheckConstraint(
        "(status = 'paused_limit_reached') = (limit_reached_on IS NOT NULL)", name="sender_accounts_check1"
    ),
    CheckConstraint(
        "(dkim_domain IS NULL) = (dkim_selector IS NULL)"
        " AND (dkim_domain IS NULL) = (dkim_private_key_encrypted IS NULL)",
        name="sender_accounts_check2",
    ),
)

sender_usage = Table(
    "sender_usage",
    metadata,
    Column(
        "sender_account_id",
        BigInteger,
        ForeignKey(sender_accounts.c.id, ondelete="CASCADE", name="sender_usage_sender_account_id_fkey"),
        nullable=False,
    ),
    Column("day", Date, nullable=False),
    Column("sent", Integer, nullable=False, server_default=text("0")),
    Column("bounces", Integer, nullable=False, server_default=text("0")),
    Column("errors", Integer, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("sender_account_id", "day", name="sender_usage_pkey"),
    CheckConstraint("sent >= 0", name="sender_usage_sent_check"),
    CheckConstraint("bounces >= 0", name="sender_usage_bounces_check"),
    CheckConstraint("errors >= 0", name="sender_usage_errors_check"),
)

# Revision 0004: the next free send slot of a paced sender account, shared by every worker.
sender_pacing = Table(
    "sender_pacing",
    metadata,
    Column(
        "sender_account_id",
        BigInteger,
        ForeignKey(sender_accounts.c.id, ondelete="CASCADE", name="sender_pacing_sender_account_id_fkey"),
        nullable=False,
    ),
    Column("next_send_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("sender_account_id", name="sender_pacing_pkey"),
)

email_queue = Table(
    "email_queue",
    metadata,
    Column("id", BigInteger, Identity(always=False), nullable=False),
    Column("recipient_email", Text, nullable=False),
    Column("recipient_name", Text),
    Column("subject", Text, nullable=False),
    Column("text_body", Text),
    Column("html_body", Text),
    Column("headers", JSONB, nullable=False, server_default=text("'{}'")),
    Column("template", Text),
    Column("locale", Text),
    Column("template_data", JSONB),
    Column("priority", Integer, nullable=False, server_default=text("0")),
    Column("scheduled_for", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("status", Text, nullable=False, server_default=text("'pending'")),
    Column("lease_owner", Text),
    Column("lease_token", UUID(as_uuid=True)),
    Column("lease_expires_at", DateTime(timezone=True)),
    Column(
        "sender_account_id",
        BigInteger,
        ForeignKey(sender_accounts.c.id, ondelete="SET NULL", name="email_queue_sender_account_id_fkey"),
    ),
    Column("retry_count", Integer, nullable=False, server_default=text("0")),
    Column("max_retries", Integer, nullable=False, server_default=text("5")),
    Column("next_retry_at", DateTime(timezone=True)),
    Column("last_error", Text),
    Column("error_details", JSONB),
    Column("suppression_reason", Text),
    Column("idempotency_key", Text),
    Column("campaign_id", Text),
    Column("transactional", Boolean, nullable=False, server_default=text("true")),
    Column("track_opens", Boolean, nullable=False, server_default=text("false")),
    Column("track_clicks", Boolean, nullable=False, server_default=text("false")),
    Column("tracking_token", UUID(as_uuid=True)),
    Column("reference_type", Text),
    Column("reference_id", Text),
    Column("message_id", Text),
    Column("created_by", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("assigned_at", DateTime(timezone=True)),
    Column("sent_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("unsubscribe_token", UUID(as_uuid=True)),  # revision 0002 (tracking)
    PrimaryKeyConstraint("id", name="email_queue_pkey"),
    CheckConstraint(
        r"length(recipient_email) BETWEEN 3 AND 254 AND recipient_email !~ '[\x00-\x20\x7f<>]'",
        name="email_queue_recipient_email_check",
    ),
    CheckConstraint(r"recipient_name !~ '[\x00-\x1f\x7f]'", name="email_queue_recipient_name_check"),
    CheckConstraint(r"subject !~ '[\x00-\x1f\x7f]'", name="email_queue_subject_check"),
    CheckConstraint("jsonb_typeof(headers) = 'object'", name="email_queue_headers_check"),
    CheckConstraint("priority BETWEEN -1000 AND 1000", name="email_queue_priority_check"),
    CheckConstraint(
        "status IN ('pending', 'assigned', 'sent', 'failed', 'cancelled', 'suppressed')",
        name="email_queue_status_check",
    ),
    CheckConstraint("retry_count >= 0", name="email_queue_retry_count_check"),
    CheckConstraint("max_retries BETWEEN 0 AND 100", name="email_queue_max_retries_check"),
    CheckConstraint("length(idempotency_key) BETWEEN 1 AND 255", name="email_queue_idempotency_key_check"),
    CheckConstraint("length(campaign_id) BETWEEN 1 AND 100", name="email_queue_campaign_id_check"),
    CheckConstraint("text_body IS NOT NULL OR html_body IS NOT NULL", name="email_queue_check"),
    CheckConstraint("retry_count <= max_retries", name="email_queue_check1"),
    CheckConstraint(
        "(status = 'assigned') = (lease_token IS NOT NULL AND lease_owner IS NOT NULL"
        " AND lease_expires_at IS NOT NULL)",
        name="email_queue_check2",
    ),
    CheckConstraint("(status = 'sent') = (sent_at IS NOT NULL)", name="email_queue_check3"),
    CheckConstraint("status <> 'suppressed' OR suppression_reason IS NOT NULL", name="email_queue_check4"),
    CheckConstraint(
        "status NOT IN ('sent', 'failed', 'cancelled', 'suppressed') OR finished_at IS NOT NULL",
        name="email_queue_check5",
    ),
    CheckConstraint("status <> 'failed' OR last_error IS NOT NULL", name="email_queue_check6"),
)

Index(
    "email_queue_claim_idx",
    email_queue.c.priority.desc(),
    email_queue.c.scheduled_for,
    email_queue.c.id,
    postgresql_where=text("status = 'pending'"),
)
Index(
    "email_queue_due_idx",
    email_queue.c.scheduled_for,
    postgresql_where=text("status = 'pending'"),
)
# Revision 0004: only keyed email is indexed (the constraint it replaces indexed every NULL key too).
Index(
    "email_queue_idempotency_key_key",
    email_queue.c.idempotency_key,
    unique=True,
    postgresql_where=text("idempotency_key IS NOT NULL"),
)
Index("email_queue_lease_idx", email_queue.c.lease_expires_at, postgresql_where=text("status = 'assigned'"))
Index("email_queue_failed_idx", email_queue.c.finished_at.desc(), postgresql_where=text("status = 'failed'"))
Index(
    "email_queue_retrying_idx",
    email_queue.c.scheduled_for,
    email_queue.c.id,
    postgresql_where=text("status = 'pending' AND retry_count > 0"),
)
Index(
    "email_queue_suppressed_idx",
    email_queue.c.finished_at.desc(),
    postgresql_where=text("status = 'suppressed'"),
)
Index("email_queue_sent_idx", email_queue.c.sent_at, postgresql_where=text("status = 'sent'"))
Index("email_queue_recipient_idx", func.lower(email_queue.c.recipient_email))
Index("email_queue_campaign_idx", email_queue.c.campaign_id, postgresql_where=text("campaign_id IS NOT NULL"))
Index(
    "email_queue_reference_idx",
    email_queue.c.reference_type,
    email_queue.c.reference_id,
    postgresql_where=text("reference_type IS NOT NULL"),
)
Index(
    "email_queue_tracking_token_idx",
    email_queue.c.tracking_token,
    unique=True,
    postgresql_where=text("tracking_token IS NOT NULL"),
)
Index(
    "email_queue_unsubscribe_token_idx",
    email_queue.c.unsubscribe_token,
    unique=True,
    postgresql_where=text("unsubscribe_token IS NOT NULL"),
)

send_logs = Table(
    "send_logs",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("attempted_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("email_id", BigInteger, nullable=False),
    Column("sender_account_id", BigInteger),
    Column("recipient_email", Text, nullable=False),
    Column("campaign_id", Text),
    Column("attempt", Integer, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("smtp_code", Integer),
    Column("enhanced_code", Text),
    Column("response", Text),
    Column("duration_ms", Integer),
    Column("worker", Text),
    PrimaryKeyConstraint("id", "attempted_at", name="send_logs_pkey"),
    CheckConstraint("attempt >= 1", name="send_logs_attempt_check"),
    CheckConstraint(
        "outcome IN ('sent', 'transient', 'permanent', 'bounced', 'auth_failed',"
        " 'local_error', 'suppressed')",
        name="send_logs_outcome_check",
    ),
    CheckConstraint("smtp_code BETWEEN 100 AND 599", name="send_logs_smtp_code_check"),
    CheckConstraint(r"enhanced_code ~ '^[245]\.\d{1,3}\.\d{1,3}$'", name="send_logs_enhanced_code_check"),
    CheckConstraint("duration_ms >= 0", name="send_logs_duration_ms_check"),
    Index("send_logs_email_idx", "email_id", "attempted_at"),
    Index("send_logs_attempted_idx", "attempted_at"),
    Index("send_logs_sender_idx", "sender_account_id", "attempted_at"),
    postgresql_partition_by="RANGE (attempted_at)",
)

# The worker's write-ahead record of accepted email, applied to email_queue and send_logs per batch.
sent_journal = Table(
    "sent_journal",
    metadata,
    Column("email_id", BigInteger, nullable=False),
    Column("lease_token", UUID(as_uuid=True), nullable=False),
    Column("sender_account_id", BigInteger, nullable=False),
    Column("sent_at", DateTime(timezone=True), nullable=False, server_default=text("clock_timestamp()")),
    Column("smtp_code", Integer),
    Column("enhanced_code", Text),
    Column("response", Text, nullable=False),
    Column("duration_ms", Integer, nullable=False),
    Column("message_id", Text),
    Column("worker", Text, nullable=False),
    Index("sent_journal_token_idx", "lease_token"),
)

bounce_list = Table(
    "bounce_list",
    metadata,
    Column("email", Text, nullable=False),
    Column("bounce_type", Text, nullable=False),
    Column("reason", Text),
    Column("smtp_code", Integer),
    Column("enhanced_code", Text),
    Column(
        "sender_account_id",
        BigInteger,
        ForeignKey(sender_accounts.c.id, ondelete="SET NULL", name="bounce_list_sender_account_id_fkey"),
    ),
    Column("campaign_id", Text),
    Column("first_bounced_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("last_bounced_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("bounce_count", Integer, nullable=False, server_default=text("1")),
    PrimaryKeyConstraint("email", name="bounce_list_pkey"),
    CheckConstraint("email = lower(email)", name="bounce_list_email_check"),
    CheckConstraint("bounce_type IN ('hard', 'soft', 'complaint')", name="bounce_list_bounce_type_check"),
    CheckConstraint("bounce_count >= 1", name="bounce_list_bounce_count_check"),
    CheckConstraint("last_bounced_at >= first_bounced_at", name="bounce_list_check"),
)

unsubscribe_list = Table(
    "unsubscribe_list",
    metadata,
    Column("email", Text, nullable=False),
    Column("reason", Text),
    Column("source", Text, nullable=False, server_default=text("'operator'")),
    Column("campaign_id", Text),
    Column("email_id", BigInteger),
    Column("user_agent", Text),
    Column("ip_address", INET),
    Column("unsubscribed_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("email", name="unsubscribe_list_pkey"),
    CheckConstraint("email = lower(email)", name="unsubscribe_list_email_check"),
    CheckConstraint(
        "source IN ('one_click', 'link', 'mailto', 'operator', 'import', 'privacy')",
        name="unsubscribe_list_source_check",
    ),
)
Index(
    "unsubscribe_list_campaign_idx",
    unsubscribe_list.c.campaign_id,
    postgresql_where=text("campaign_id IS NOT NULL"),
)
Index("unsubscribe_list_unsubscribed_at_idx", unsubscribe_list.c.unsubscribed_at)

tracked_links = Table(
    "tracked_links",
    metadata,
    Column("token", UUID(as_uuid=True), nullable=False, server_default=text("gen_random_uuid()")),
    Column(
        "email_id",
        BigInteger,
        ForeignKey(email_queue.c.id, ondelete="CASCADE", name="tracked_links_email_id_fkey"),
        nullable=False,
    ),
    Column("position", Integer, nullable=False),
    Column("url", Text, nullable=False),
    PrimaryKeyConstraint("token", name="tracked_links_pkey"),
    UniqueConstraint("email_id", "position", name="tracked_links_email_id_position_key"),
    CheckConstraint("position >= 0", name="tracked_links_position_check"),
    CheckConstraint("url ~* '^https?://'", name="tracked_links_url_check"),
)

# Revision 0002 (tracking): what outlives a sent email that retention deletes (filled by a trigger).
archived_emails = Table(
    "archived_emails",
    metadata,
    Column("email_id", BigInteger, nullable=False),
    Column("sent_at", DateTime(timezone=True), nullable=False),
    Column("campaign_id", Text),
    Column("unsubscribe_token", UUID(as_uuid=True)),
    Column("track_opens", Boolean, nullable=False),
    Column("track_clicks", Boolean, nullable=False),
    PrimaryKeyConstraint("email_id", name="archived_emails_pkey"),
)
Index(
    "archived_emails_unsubscribe_token_idx",
    archived_emails.c.unsubscribe_token,
    unique=True,
    postgresql_where=text("unsubscribe_token IS NOT NULL"),
)
Index(
    "archived_emails_campaign_idx",
    archived_emails.c.campaign_id,
    postgresql_where=text("campaign_id IS NOT NULL"),
)
Index("archived_emails_sent_at_idx", archived_emails.c.sent_at, postgresql_using="brin")

open_events = Table(
    "open_events",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("email_id", BigInteger, nullable=False),
    Column("campaign_id", Text),
    Column("ip_address", INET),
    Column("user_agent", Text),
    PrimaryKeyConstraint("id", "occurred_at", name="open_events_pkey"),
    Index("open_events_email_idx", "email_id"),
    Index("open_events_campaign_idx", "campaign_id", "occurred_at"),
    Index("open_events_occurred_at_idx", "occurred_at"),
    postgresql_partition_by="RANGE (occurred_at)",
)

click_events = Table(
    "click_events",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("email_id", BigInteger, nullable=False),
    Column("link_token", UUID(as_uuid=True), nullable=False),
    Column("url", Text, nullable=False),
    Column("campaign_id", Text),
    Column("ip_address", INET),
    Column("user_agent", Text),
    PrimaryKeyConstraint("id", "occurred_at", name="click_events_pkey"),
    Index("click_events_email_idx", "email_id"),
    Index("click_events_campaign_idx", "campaign_id", "occurred_at"),
    Index("click_events_occurred_at_idx", "occurred_at"),
    postgresql_partition_by="RANGE (occurred_at)",
)

templates = Table(
    "templates",
    metadata,
    Column("name", Text, nullable=False),
    Column("locale", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("text_body", Text),
    Column("html_body", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("name", "locale", name="templates_pkey"),
    CheckConstraint("name ~ '^[a-z][a-z0-9_]{0,63}$'", name="templates_name_check"),
    CheckConstraint("locale ~ '^[a-z]{2}(-[A-Z]{2})?$'", name="templates_locale_check"),
    CheckConstraint("text_body IS NOT NULL OR html_body IS NOT NULL", name="templates_check"),
)

# ---------------------------------------------------------------------------
# User lifecycle (reference 01)
# ---------------------------------------------------------------------------

accounts = Table(
    "accounts",
    metadata,
    Column("id", BigInteger, Identity(always=False), nullable=False),
    Column("email", Text, nullable=False),
    Column("login", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'provisioned'")),
    Column("locale", Text, nullable=False, server_default=text("'en'")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("status_changed_at", DateTime(timezone=True)),
    Column("activated_at", DateTime(timezone=True)),
    Column("suspended_at", DateTime(timezone=True)),
    Column("unsuspended_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("id", name="accounts_pkey"),
    UniqueConstraint("email", name="accounts_email_key"),
    UniqueConstraint("login", name="accounts_login_key"),
    CheckConstraint("length(email) BETWEEN 3 AND 254", name="accounts_email_check"),
    CheckConstraint("length(login) BETWEEN 1 AND 254", name="accounts_login_check"),
    CheckConstraint("status IN ('provisioned', 'active', 'suspended')", name="accounts_status_check"),
    CheckConstraint("status <> 'active' OR activated_at IS NOT NULL", name="accounts_check"),
    CheckConstraint("(status = 'suspended') = (suspended_at IS NOT NULL)", name="accounts_check1"),
    Index("accounts_status_idx", "status"),
)

tokens = Table(
    "tokens",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("action", Text, nullable=False),
    # 0002: the plain secret is kept only until the mailer handled the token; it is found by secret_hash
    Column("secret", BYTEA, server_default=text("mailroom.random_secret()")),
    Column("code", Text, nullable=False, server_default=text("mailroom.random_code()")),
    Column(
        "account_id",
        BigInteger,
        ForeignKey(
            accounts.c.id,
            ondelete="CASCADE",
            deferrable=True,
            initially="DEFERRED",
            name="tokens_account_id_fkey",
        ),
        nullable=False,
    ),
    Column(
        "expires_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=text("now() + interval '15 minutes'"),
    ),
    Column("consumed_at", DateTime(timezone=True)),
    Column("mailed_at", DateTime(timezone=True)),
    Column("email_id", BigInteger),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("mail_skipped_reason", Text),  # 0002: why the mailer did not mail it (expired, account state)
    Column("secret_hash", BYTEA, nullable=False),  # 0002: SHA-256 of the secret (set by trigger)
    Column("failed_attempts", Integer, nullable=False, server_default=text("0")),  # 0002: wrong codes
    PrimaryKeyConstraint("id", name="tokens_pkey"),
    UniqueConstraint("secret_hash", name="tokens_secret_hash_key"),
    CheckConstraint("octet_length(secret_hash) = 32", name="tokens_secret_hash_check"),
    CheckConstraint(
        "(secret IS NULL) = (mailed_at IS NOT NULL OR mail_skipped_reason IS NOT NULL)",
        name="tokens_secret_until_handled_check",
    ),
    CheckConstraint("failed_attempts >= 0", name="tokens_failed_attempts_check"),
    CheckConstraint("action IN ('activation', 'password_recovery')", name="tokens_action_check"),
    CheckConstraint("octet_length(secret) = 32", name="tokens_secret_check"),
    CheckConstraint("code ~ '^[0-9]{5}$'", name="tokens_code_check"),
    CheckConstraint("expires_at > created_at", name="tokens_check"),
    Index(
        "tokens_to_mail_idx",
        "id",
        postgresql_where=text("mailed_at IS NULL AND mail_skipped_reason IS NULL"),
    ),
    Index("tokens_account_idx", "account_id", "action"),
)

jobs = Table(
    "jobs",
    metadata,
    Column("name", Text, nullable=False),
    Column("last_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("last_run_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("name", name="jobs_pkey"),
)

# ---------------------------------------------------------------------------
# Time-based scheduling (reference 02)
# ---------------------------------------------------------------------------

people = Table(
    "people",
    metadata,
    Column("id", UUID(as_uuid=True), nullable=False, server_default=text("gen_random_uuid()")),
    Column("email", Text, nullable=False),
    Column("first_name", Text, nullable=False),
    Column("last_name", Text, nullable=False),
    Column("date_of_birth", Date, nullable=False),
    Column("time_zone", Text, nullable=False),
    Column("locale", Text, nullable=False, server_default=text("'en'")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("version", Integer, nullable=False, server_default=text("1")),
    PrimaryKeyConstraint("id", name="people_pkey"),
    UniqueConstraint("email", name="people_email_key"),
    CheckConstraint("length(email) BETWEEN 3 AND 254", name="people_email_check"),
    CheckConstraint("length(first_name) BETWEEN 1 AND 100", name="people_first_name_check"),
    CheckConstraint("length(last_name) BETWEEN 1 AND 100", name="people_last_name_check"),
    CheckConstraint("date_of_birth > DATE '1900-01-01'", name="people_date_of_birth_check"),
)

events = Table(
    "events",
    metadata,
    # 0002: time-ordered ids (uuidv7) where the server has them
    Column("id", UUID(as_uuid=True), nullable=False, server_default=text("mailroom.new_event_id()")),
    Column(
        "person_id",
        UUID(as_uuid=True),
        ForeignKey(people.c.id, ondelete="CASCADE", name="events_person_id_fkey"),
        nullable=False,
    ),
    Column("event_type", Text, nullable=False, server_default=text("'birthday'")),
    Column("status", Text, nullable=False, server_default=text("'pending'")),
    Column("due_at", DateTime(timezone=True), nullable=False),
    Column("local_due_at", DateTime(timezone=False), nullable=False),
    Column("time_zone", Text, nullable=False),
    Column("executed_at", DateTime(timezone=True)),
    Column("failure_reason", Text),
    Column("retry_count", Integer, nullable=False, server_default=text("0")),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("idempotency_key", Text, nullable=False),
    Column("email_id", BigInteger),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("id", name="events_pkey"),
    UniqueConstraint("idempotency_key", name="events_idempotency_key_key"),
    CheckConstraint("event_type IN ('birthday')", name="events_event_type_check"),
    CheckConstraint(
        "status IN ('pending', 'processing', 'completed', 'failed', 'missed', 'cancelled')",
        name="events_status_check",
    ),
    CheckConstraint("retry_count >= 0", name="events_retry_count_check"),
    CheckConstraint("version >= 1", name="events_version_check"),
    CheckConstraint("status <> 'completed' OR executed_at IS NOT NULL", name="events_check"),
    CheckConstraint("status <> 'failed' OR failure_reason IS NOT NULL", name="events_check1"),
    Index("events_due_idx", "due_at", postgresql_where=text("status = 'pending'")),
    Index(
        "events_one_pending_idx",
        "person_id",
        "event_type",
        unique=True,
        postgresql_where=text("status IN ('pending', 'processing')"),
    ),
    Index("events_person_idx", "person_id"),
    Index("events_processing_idx", "updated_at", postgresql_where=text("status = 'processing'")),
)

# 0002: the tz database's zone names, so checking a person's zone is an index probe
time_zone_names = Table(
    "time_zone_names",
    metadata,
    Column("name", Text, nullable=False),
    PrimaryKeyConstraint("name", name="time_zone_names_pkey"),
)

# ---------------------------------------------------------------------------
# Inbox for external events (reference 03)
# ---------------------------------------------------------------------------

inbox = Table(
    "inbox",
    metadata,
    Column("message_id", Text, nullable=False),
    Column("consumer", Text, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("receive_count", Integer, nullable=False, server_default=text("1")),
    Column("processed_at", DateTime(timezone=True)),
    Column("email_id", BigInteger),
    PrimaryKeyConstraint("message_id", "consumer", name="inbox_pkey"),
    CheckConstraint("length(message_id) BETWEEN 1 AND 255", name="inbox_message_id_check"),
    CheckConstraint("length(consumer) BETWEEN 1 AND 255", name="inbox_consumer_check"),
    CheckConstraint("receive_count >= 1", name="inbox_receive_count_check"),
    Index("inbox_received_idx", "received_at"),
)

# ---------------------------------------------------------------------------
# Signed document acknowledgements (reference 04)
# ---------------------------------------------------------------------------

documents = Table(
    "documents",
    metadata,
    Column("doc_id", Text, nullable=False),
    Column("title", Text, nullable=False, server_default=text("''")),
    Column("url", Text, nullable=False, server_default=text("''")),
    Column("checksum", Text),
    Column("checksum_algorithm", Text),
    Column("description", Text, nullable=False, server_default=text("''")),
    Column("created_by", Text, nullable=False, server_default=text("''")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("doc_id", name="documents_pkey"),
    CheckConstraint("doc_id ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'", name="documents_doc_id_check"),
    CheckConstraint("url = '' OR url ~* '^https?://'", name="documents_url_check"),
    CheckConstraint("checksum ~ '^[0-9a-f]{64}([0-9a-f]{64})?$'", name="documents_checksum_check"),
    CheckConstraint(
        "checksum_algorithm IN ('SHA-256', 'SHA-512')", name="documents_checksum_algorithm_check"
    ),
    CheckConstraint("(checksum IS NULL) = (checksum_algorithm IS NULL)", name="documents_check"),
    CheckConstraint(
        "checksum IS NULL"
        " OR (checksum_algorithm = 'SHA-256' AND length(checksum) = 64)"
        " OR (checksum_algorithm = 'SHA-512' AND length(checksum) = 128)",
        name="documents_check1",
    ),
)

expected_signers = Table(
    "expected_signers",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column(
        "doc_id",
        Text,
        ForeignKey(documents.c.doc_id, ondelete="CASCADE", name="expected_signers_doc_id_fkey"),
        nullable=False,
    ),
    Column("email", Text, nullable=False),
    Column("name", Text, nullable=False, server_default=text("''")),
    Column("locale", Text, nullable=False, server_default=text("'en'")),
    Column("added_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("added_by", Text, nullable=False, server_default=text("''")),
    Column("notes", Text),
    PrimaryKeyConstraint("id", name="expected_signers_pkey"),
    UniqueConstraint("doc_id", "email", name="expected_signers_doc_id_email_key"),
    CheckConstraint("email = lower(email)", name="expected_signers_email_check"),
)

signatures = Table(
    "signatures",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column(
        "doc_id",
        Text,
        ForeignKey(documents.c.doc_id, name="signatures_doc_id_fkey"),
        nullable=False,
    ),
    Column("signer_email", Text, nullable=False),
    Column("signer_name", Text),
    Column("signed_at", DateTime(timezone=True), nullable=False),
    Column("nonce", Text, nullable=False),
    Column("payload", Text, nullable=False),
    Column("payload_hash", Text, nullable=False),
    Column("signature", Text, nullable=False),
    Column("prev_hash", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("id", name="signatures_pkey"),
    UniqueConstraint("nonce", name="signatures_nonce_key"),
    UniqueConstraint("doc_id", "signer_email", name="signatures_doc_id_signer_email_key"),
    CheckConstraint("signer_email = lower(signer_email)", name="signatures_signer_email_check"),
    CheckConstraint("length(nonce) >= 16", name="signatures_nonce_check"),
    CheckConstraint("payload_hash ~ '^[0-9a-f]{64}$'", name="signatures_payload_hash_check"),
    CheckConstraint("prev_hash ~ '^[0-9a-f]{64}$'", name="signatures_prev_hash_check"),
    Index("signatures_doc_idx", "doc_id", "id"),
    # The chain of one document never forks: at most one signature may follow any other.
    Index("signatures_chain_idx", "doc_id", "prev_hash", unique=True, postgresql_nulls_not_distinct=True),
)

reminder_logs = Table(
    "reminder_logs",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("doc_id", Text, nullable=False),
    Column("recipient_email", Text, nullable=False),
    Column("email_id", BigInteger),
    Column("requested_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("requested_by", Text, nullable=False, server_default=text("''")),
    Column("template", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'queued'")),
    Column("finished_at", DateTime(timezone=True)),
    Column("error_message", Text),
    PrimaryKeyConstraint("id", name="reminder_logs_pkey"),
    ForeignKeyConstraint(
        ["doc_id", "recipient_email"],
        [expected_signers.c.doc_id, expected_signers.c.email],
        ondelete="CASCADE",
        name="reminder_logs_doc_id_recipient_email_fkey",
    ),
    CheckConstraint(
        "status IN ('queued', 'sent', 'failed', 'bounced', 'suppressed', 'cancelled')",
        name="reminder_logs_status_check",
    ),
)

Index(
    "reminder_logs_doc_idx",
    reminder_logs.c.doc_id,
    reminder_logs.c.recipient_email,
    reminder_logs.c.requested_at.desc(),
)
Index("reminder_logs_email_idx", reminder_logs.c.email_id, postgresql_where=text("status = 'queued'"))

checksum_verifications = Table(
    "checksum_verifications",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column(
        "doc_id",
        Text,
        ForeignKey(documents.c.doc_id, ondelete="CASCADE", name="checksum_verifications_doc_id_fkey"),
        nullable=False,
    ),
    Column("verified_by", Text, nullable=False, server_default=text("''")),
    Column("verified_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("stored_checksum", Text),
    Column("calculated_checksum", Text, nullable=False),
    Column("algorithm", Text, nullable=False),
    Column("is_valid", Boolean, nullable=False),
    Column("error_message", Text),
    PrimaryKeyConstraint("id", name="checksum_verifications_pkey"),
    CheckConstraint("algorithm IN ('SHA-256', 'SHA-512')", name="checksum_verifications_algorithm_check"),
    CheckConstraint("is_valid OR error_message IS NOT NULL", name="checksum_verifications_check"),
)
