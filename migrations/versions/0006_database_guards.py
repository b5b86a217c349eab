"""The database guards the data: an audit trail, content rules for every writer, a SQL enqueue API,
many recipients, least-privilege roles, retention of every final state, a tamper-evident signature
chain. Written as SQL parts in `0006/`.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0006")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
