"""The Python API's door (mailroom.enqueue_rows) writes the same rows for less of the server's time.
Written as SQL parts in `0016/`.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0016")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
