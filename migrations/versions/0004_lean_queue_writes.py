"""Lean queue writes: the idempotency key's unique index holds only the emails that have a key.

A unique constraint indexes every row, NULL keys included, so each enqueue and each status change
of an email without a key (most email) paid for an index entry nobody can look up. reserve_quota
now advances a sender account's warm-up stage, once a UTC day, after a full day with few bounces
(`30_warmup.sql`). Written as SQL parts in `0004/`, like revisions 0002 and 0003.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0004")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
