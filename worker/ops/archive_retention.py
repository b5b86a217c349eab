"""Archive files past `archive_retention_days` are overwritten and deleted (a maintenance step)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import psycopg

from worker.core.config import Settings
from worker.ops.archive_catalogue import catalogue, expired, shred
from worker.ops.archive_files import ArchiveError, archive_directory, directory_lock
from worker.ops.maintenance_report import MaintenanceReport, StepReport

log = logging.getLogger(__name__)


def expire_archives(
    conn: psycopg.Connection[Any], settings: Settings, now: datetime, report: MaintenanceReport
) -> StepReport:
    """Delete the archive files whose period ended more than `archive_retention_days` before `now`."""
    step = StepReport("expire_archives")
    directory = archive_directory(settings)
    before = (now - timedelta(days=settings.archive_retention_days)).date()
    files = expired(catalogue(directory), before)
    if not files:
        return step
    if report.dry_run:
        step.rows = len(files)
        step.details.extend(f"would delete {f.name} (ended {f.end}, before {before})" for f in files)
        return step
    try:
        with directory_lock(directory, wait=False):
            for file in files:
                shred(file.path)
                step.rows += 1
                step.details.append(f"deleted {file.name} (ended {file.end}, before {before})")
    except (ArchiveError, OSError) as exc:
        report.errors.append(f"expire_archives: {exc}")
        log.error("maintenance: archive files past retention not all deleted: %s", exc)
    return step
