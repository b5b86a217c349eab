"""The whole data model: delivery core, lifecycle, scheduling, inbox and signatures.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TABLES = (
    "checksum_verifications",
    "reminder_logs",
    "signatures",
    "expected_signers",
    "documents",
    "inbox",
    "events",
    "people",
    "jobs",
    "tokens",
    "accounts",
    "templates",
    "click_events",
    "open_events",
    "tracked_links",
    "unsubscribe_list",
    "bounce_list",
    "send_logs",
    "email_queue",
    "sender_usage",
    "sender_accounts",
)

FUNCTIONS = (
    "touch_row()",
    "forbid_created_at_change()",
    "notify_change()",
    "random_secret()",
    "random_code()",
    "ensure_month_partitions(text, date, integer)",
    "sender_accounts_before_update()",
    "reserve_quota(bigint, integer)",
    "release_quota(bigint, integer)",
    "email_queue_before_update()",
    "email_queue_before_insert()",
    "email_queue_notify_insert()",
    "email_queue_notify_update()",
    "accounts_before_insert()",
    "accounts_before_status_change()",
    "tokens_after_consumed()",
    "is_time_zone(text)",
    "people_validate()",
)


def upgrade() -> None:
    """Create every table, index, trigger and function of revision 0001."""
    # Run through the driver directly: the file is many statements and uses % in format strings,
    # which a parameter-parsing layer would misread.
    raw = op.get_bind().connection.driver_connection
    raw.execute(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))


def downgrade() -> None:
    """Drop everything revision 0001 created (Alembic's own version table stays)."""
    for table in TABLES:
        op.execute(f"DROP TABLE IF EXISTS mailroom.{table} CASCADE")
    for function in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS mailroom.{function} CASCADE")
