"""The lifecycle mailer as a worker producer: new tokens become activation and recovery emails."""

from __future__ import annotations

from typing import Any

import psycopg

from worker.config import Settings
from worker.lifecycle import mail_tokens
from worker.producers import Producer


async def run_once(conn: psycopg.AsyncConnection[Any], settings: Settings) -> int:
    """Mail one batch of new tokens; return how many tokens were handled (mailed or skipped)."""
    return (await mail_tokens(conn, settings)).handled


PRODUCER = Producer("lifecycle", run_once, channels=("mailroom_tokens",), interval_seconds=60.0)
