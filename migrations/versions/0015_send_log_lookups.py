"""Send logs found by recipient and by campaign through indexes of their own, instead of by reading every
month of the log. Written as SQL parts in `0015/`.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0015")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
