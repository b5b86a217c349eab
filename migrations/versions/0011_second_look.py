"""A second look: doors that gave way under review (application audit rows, what a suppressed
enqueue tells, DMARC report bounds). Written as SQL parts in `0011/`.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0011")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
