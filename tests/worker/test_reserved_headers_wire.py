"""Relay-control and trace headers never reach the wire from an application: a row that holds one
(stored before revision 0008 reserved them, or around the rules) fails alone instead of being sent."""

from __future__ import annotations

import psycopg

from tests.worker.helpers import BYPASS_RULES, add_sender, enqueue_many, run_until_drained, statuses
from worker.core.config import Settings
from worker.devtools.sink import RunningSink


async def test_a_stored_relay_control_header_fails_its_email_and_is_never_sent(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 2)
    with psycopg.connect(db_url) as conn:
        conn.execute(BYPASS_RULES)  # as a row written before the header was reserved
        conn.execute(
            "UPDATE mailroom.email_queue SET headers = %s::jsonb WHERE recipient_email = 'u1@example.com'",
            (
                '{"X-SMTPAPI": "{\\"filters\\": {\\"bypass_list_management\\": {\\"settings\\": {\\"enable\\": 1}}}}"}',
            ),
        )
        conn.execute(BYPASS_RULES.replace("DISABLE", "ENABLE"))
    await run_until_drained(db_url, fast)
    assert statuses(db_url) == {"sent": 1, "failed": 1}
    assert [m.message["X-SMTPAPI"] for m in smtp_sink.messages] == [None]
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT last_error FROM mailroom.email_queue WHERE status = 'failed'").fetchone()
    assert row is not None and "headers.X-SMTPAPI: a relay-control" in row[0]
