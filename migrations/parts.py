"""Revisions written as SQL parts: one file per area in `versions/NNNN/` (`NN_area.sql`, run in name
order on upgrade) with its undo (`NN_area.down.sql`, run in reverse order on downgrade)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from alembic import op
from psycopg import sql

# `{{rules.NAME}}` in a part: that entry of the content rules (worker/core/content_rules.json) as a
# SQL literal; `{{rules}}` the whole specification as jsonb. Python and the database share one file.
_RULE = re.compile(r"\{\{rules(?:\.([a-z_]+))?\}\}")


def _with_rules(text: str, conn: Any) -> str:
    if "{{rules" not in text:
        return text
    from worker.core.rules import spec_text

    spec = json.loads(spec_text())

    def literal(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return sql.Literal(json.dumps(spec)).as_string(conn) + "::jsonb"
        value = spec[name]
        if isinstance(value, list):
            return "ARRAY[" + ", ".join(sql.Literal(v).as_string(conn) for v in value) + "]::text[]"
        return sql.Literal(value).as_string(conn)

    return _RULE.sub(literal, text)


def _run(path: Path) -> None:
    # Through the driver directly: a part is many statements and may use % in format strings.
    raw = op.get_bind().connection.driver_connection
    raw.execute(_with_rules(path.read_text(encoding="utf-8"), raw))


def _parts(directory: Path, pattern: str) -> list[Path]:
    found = sorted(directory.glob(pattern))
    if not found:
        # An installation that left the SQL out must fail here, not migrate to an empty revision.
        raise RuntimeError(f"no SQL parts ({pattern}) in {directory}")
    return found


def upgrade(directory: Path) -> None:
    """Apply every area's part in name order."""
    for path in _parts(directory, "*.sql"):
        if not path.name.endswith(".down.sql"):
            _run(path)


def downgrade(directory: Path) -> None:
    """Undo every area's part in reverse name order."""
    for path in reversed(_parts(directory, "*.down.sql")):
        _run(path)
