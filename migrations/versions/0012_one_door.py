"""One door for every role: the Python API, the CLI and the adapters enqueue through SECURITY DEFINER
functions an application role may call, and the SQL function takes every field. Written as SQL parts in `0012/`.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0012")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
