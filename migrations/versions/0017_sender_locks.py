"""A sender's row is locked FOR NO KEY UPDATE by claims, finishes, quota and rescue, so the foreign key
checks of the sent journal no longer wait behind a claim. Written as SQL parts in `0017/`.

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
