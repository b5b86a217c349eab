"""Events back to the application: webhook endpoints, the events written in the transaction of the
change they report, and one delivery per endpoint and event. Written as SQL parts in `0014/`.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0014")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
