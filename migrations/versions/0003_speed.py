"""Speed: cheaper writes on the two hot paths, bulk enqueue (COPY) and recording delivery attempts.

Like revision 0002, written as one SQL file per area in `0003/` (`NN_area.sql`, run in name
order) with its undo (`NN_area.down.sql`, run in reverse order).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0003")


def _run(path: Path) -> None:
    # Through the driver directly: a part is many statements and may use % in format strings.
    raw = op.get_bind().connection.driver_connection
    raw.execute(path.read_text(encoding="utf-8"))


def upgrade() -> None:
    """Apply every area's part in name order."""
    for path in sorted(p for p in PARTS.glob("*.sql") if not p.name.endswith(".down.sql")):
        _run(path)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    for path in sorted(PARTS.glob("*.down.sql"), reverse=True):
        _run(path)
