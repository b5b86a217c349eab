"""Login sessions' clean-up: a maintenance step deleting OIDC sessions unused for 37 days.

A session past that is already refused by the signing page (`worker.tracking.oidc.sessions`); this
step removes its row, with its encrypted refresh token, in chunks like the other retention steps.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg

from worker.core.config import Settings
from worker.ops.chunked_delete import Purge
from worker.ops.maintenance_report import MaintenanceReport, StepReport

IDLE_DAYS = 37  # the session rule of worker.tracking.oidc.sessions
DELETE_CHUNK = 5000

COUNT_IDLE = "SELECT count(*) FROM mailroom.oauth_sessions WHERE updated_at <= %s"
DELETE_IDLE = """
DELETE FROM mailroom.oauth_sessions
WHERE id IN (SELECT id FROM mailroom.oauth_sessions WHERE updated_at <= %s LIMIT %s)
"""

PURGE = Purge("purge_oauth_sessions", COUNT_IDLE, DELETE_IDLE, DELETE_CHUNK, "login sessions unused since")


def purge_oauth_sessions(
    conn: psycopg.Connection[Any], settings: Settings, now: datetime, report: MaintenanceReport
) -> StepReport:
    """Delete login sessions last used `IDLE_DAYS` days or more before `now`."""
    return PURGE.run(conn, now - timedelta(days=IDLE_DAYS), report)
