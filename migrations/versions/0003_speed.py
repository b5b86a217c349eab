"""Speed: cheaper writes on the two hot paths, bulk enqueue (COPY) and recording delivery attempts.

Like revision 0002, written as one SQL file per area in `0003/` (`NN_area.sql`, run in name
order) with its undo (`NN_area.down.sql`, run in reverse order).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0003")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
