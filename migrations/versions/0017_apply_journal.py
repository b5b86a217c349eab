"""A claim's sent journal is applied through an index on (lease_token, email_id), in time linear in the
claim's emails where it was quadratic. Written as SQL parts in `0017/`.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0017")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
