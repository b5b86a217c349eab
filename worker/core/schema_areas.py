"""Which area of Mailroom each table, view and function belongs to, in the order `migrations/schema.sql`
shows them: a reader finds the queue first, then what feeds and watches it.

A trigger function used by one table's triggers is shown with that table and needs no entry here; a
partition follows its parent. Anything not listed lands in a last area, `other`, which a test keeps
empty: a new table or function gets its place when it is added.
"""

from __future__ import annotations

from typing import NamedTuple


class Area(NamedTuple):
    """One `-- == title ==` section: its tables and views in reading order, then its functions."""

    title: str
    tables: tuple[str, ...]
    functions: tuple[str, ...] = ()


AREAS: tuple[Area, ...] = (
    Area(
        "schema and shared functions",
        ("alembic_version",),
        ("all_match", "clock", "forbid_created_at_change", "notify_change", "schema_revision", "touch_row"),
    ),
    Area(
        "queue and delivery",
        (
            "email_queue",
            "claims",
            "sent_journal",
            "send_logs",
            "recipient_outcomes",
            "archived_emails",
            "email_attachments",
            "attachment_contents",
            "templates",
            "workers",
        ),
        (
            "address_list_problem",
            "address_problem",
            "apply_sent_journal",
            "content_rules",
            "drop_unused_attachments",
            "email_content_problem",
            "ensure_month_partitions",
            "header_text_problem",
            "headers_problem",
            "normalise_address",
            "normalise_addresses",
            "recipients_problem",
            "refuse_content",
            "rescue_expired_claims",
            "rescue_unclaimed",
            "store_attachments",
        ),
    ),
    Area(
        "senders",
        ("sender_accounts", "sender_usage", "sender_pacing", "sender_dns_findings"),
        (
            "close_circuit",
            "open_circuit",
            "release_quota",
            "reserve_quota",
            "sender_from_domains",
            "take_probe",
        ),
    ),
    Area(
        "bounces and suppression",
        (
            "bounce_events",
            "bounce_list",
            "complaint_digests",
            "bounce_quarantine",
            "bounce_quarantine_size",
            "bounce_quarantine_clients",
            "unsubscribe_list",
            "suppression_events",
            "suppressions",
        ),
        (
            "email_suppression",
            "enqueue_suppression",
            "suppression_lists_history",
            "suppression_note",
            "suppression_reason",
            "suppression_told",
            "suppression_told_to",
            "suppression_verdict",
        ),
    ),
    Area(
        "tracking",
        ("tracked_links", "open_events", "click_events", "campaigns"),
        ("campaign_mail_policy", "tracking_webhook_events"),
    ),
    Area(
        "webhooks: events back to the application",
        ("webhook_endpoints", "webhook_events", "webhook_deliveries"),
        ("webhooks_listening",),
    ),
    Area("DMARC aggregate reports", ("dmarc_reports", "dmarc_records", "dmarc_size", "dmarc_refusals")),
    Area(
        "lifecycle: accounts and tokens",
        ("accounts", "tokens", "jobs"),
        ("random_code", "random_secret", "token_max_attempts", "token_ttl"),
    ),
    Area(
        "birthdays: people and events",
        ("people", "events", "time_zone_names"),
        (
            "birthday_in",
            "birthday_payload",
            "birthday_time",
            "event_outcome",
            "is_time_zone",
            "local_instant",
            "new_event_id",
            "next_birthday",
            "next_birthday_of",
            "schedule_birthdays",
        ),
    ),
    Area("inbox: orders and other outside events", ("inbox",)),
    Area(
        "documents and signatures",
        (
            "documents",
            "expected_signers",
            "signatures",
            "signature_heads",
            "checksum_verifications",
            "reminder_logs",
            "oauth_sessions",
        ),
        ("signature_link_hash", "signature_maintenance", "signature_maintenance_allows"),
    ),
    Area(
        "audit",
        ("audit_log", "audit_chain", "audit_pending"),
        (
            "audit",
            "audit_field",
            "audit_head_holders",
            "audit_link_pending",
            "audit_prune",
            "audit_prune_allows",
            "audit_row_hash",
            "audit_take_head",
        ),
    ),
    Area(
        "roles and API functions",
        ("my_emails",),
        (
            "app_audit",
            "cancel_my_email",
            "enqueue",
            "enqueue_outcome",
            "enqueue_rows",
            "enqueue_templates",
            "from_refusals",
            "grant_app_role",
            "grant_read_only_role",
            "is_secret_column",
            "secret_columns",
        ),
    ),
)
OTHER = "other"
