"""A claim's sent journal is applied through an index on (lease_token, email_id), in time linear in the
claim's emails where it was quadratic. Written as SQL parts in `0018/`.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0018")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
