"""Every door is hostile: reports and actions bound to one recipient, idempotency keys per role,
read-only roles without secrets, a bounded quarantine and a tamper-evident audit log. Written as SQL
parts in `0008/`.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0008")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
