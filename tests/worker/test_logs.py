"""Structured logs: MAILROOM_LOG_FORMAT=json gives one JSON object a line, with each event's facts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.worker.helpers import add_sender, enqueue_many, statuses
from worker.devtools.sink import RunningSink


def _mailroom(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("mailroom")
    return subprocess.run(
        [str(script), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.e2e
def test_worker_logs_batches_and_failures_as_json_with_recipients_masked(
    db_url: str, cli_env: dict[str, str], smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 5)
    # Servers echo the address in their replies: the log must not.
    smtp_sink.on_rcpt("u1@example.com", "550 5.1.1 <u1@example.com>: No such user")
    smtp_sink.on_rcpt("u2@example.com", "450 4.2.0 <u2@example.com> Mailbox busy")
    env = {**cli_env, "MAILROOM_LOG_FORMAT": "json", "MAILROOM_RETRY_BASE_SECONDS": "3600"}
    done = _mailroom(["worker", "--drain", "--no-producers", "--concurrency", "1"], env)
    assert done.returncode == 0, done.stderr[-2000:]
    texts = [text for text in done.stderr.splitlines() if text.strip()]
    # Every log line is JSON; the one plain line is the command's own summary.
    assert [text for text in texts if not text.startswith("{")] == ["worker: sent 3 email(s)"]
    lines = [json.loads(text) for text in texts if text.startswith("{")]
    events = {line.get("event") for line in lines}
    assert {"claimed", "attempt_failed"} <= events
    claimed = next(line for line in lines if line.get("event") == "claimed")
    assert claimed["claimed"] == 5 and claimed["suppressed"] == 0
    failed = {line["email_id"]: line for line in lines if line.get("event") == "attempt_failed"}
    assert (failed[2]["code"], failed[2]["enhanced"], failed[2]["verdict"], failed[2]["outcome"]) == (
        550,
        "5.1.1",
        "bounced",
        "failed",
    )
    assert (failed[3]["code"], failed[3]["outcome"]) == (450, "retry") and failed[3]["retry_at"]
    assert failed[2]["reply"] == "5.1.1 <u***@example.com>: No such user"
    assert failed[2]["recipient"] == "u***@example.com"
    # No full recipient address anywhere in the log.
    assert not any(f"u{i}@example.com" in done.stderr for i in range(5))
    assert statuses(db_url) == {"sent": 3, "failed": 1, "pending": 1}


@pytest.mark.e2e
def test_an_unknown_log_format_is_a_clear_error(cli_env: dict[str, str]) -> None:
    done = _mailroom(["stats"], {**cli_env, "MAILROOM_LOG_FORMAT": "xml"})
    assert done.returncode == 2
    assert "MAILROOM_LOG_FORMAT must be one of text, json, not 'xml'" in done.stderr
