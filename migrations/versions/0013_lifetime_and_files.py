"""An email's own lifetime and its cancel by the application that enqueued it; attachments and inline
images, each content stored once. Written as SQL parts in `0013/`.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0013")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
