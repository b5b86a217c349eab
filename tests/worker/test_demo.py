"""`mailroom demo --headless`: the product in one command, leaving nothing running behind it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest


@pytest.mark.e2e
def test_headless_demo_feeds_every_source_delivers_and_stops_its_worker(
    cli_env: dict[str, str], db_url: str
) -> None:
    script = Path(sys.executable).with_name("mailroom")

    def demo() -> subprocess.CompletedProcess[str]:
        argv = [str(script), "demo", "--headless", "--rounds", "3"]
        return subprocess.run(argv, capture_output=True, text=True, env=cli_env, timeout=120, check=False)

    first = demo()
    assert first.returncode == 0, first.stdout + first.stderr
    # A second run in the same home: its readers open the first run's newsletters at once, and the
    # new tracker must already listen (it said "tracker unreachable").
    done = demo()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "unreachable" not in done.stdout and "refused" not in done.stdout, done.stdout
    assert "the worker handled everything due" in done.stdout
    pid = int(done.stdout.split("worker: pid ")[1].split(",")[0])
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    with psycopg.connect(db_url) as conn:
        senders = conn.execute(
            "SELECT name, daily_limit, batch_size FROM mailroom.sender_accounts ORDER BY name"
        ).fetchall()
        sent = conn.execute("SELECT count(*) FROM mailroom.email_queue WHERE status = 'sent'").fetchone()
    # The primary claims two at a time, so the low-limit account's slot takes the rest and reaches its
    # limit as the README promises (by chance they shared, and it stopped at 33 or 38 of 40).
    assert senders == [("demo-low-limit", 40, None), ("demo-primary", 5000, 2)]
    assert sent is not None and sent[0] > 0


@pytest.mark.e2e
def test_headless_demo_prints_its_summary_on_stdout_and_its_logs_in_demo_log(
    cli_env: dict[str, str],
) -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "worker.cli.main", "demo", "--headless", "--rounds", "2"],
        capture_output=True,
        text=True,
        env=cli_env,
        cwd=root,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.splitlines()
    assert summary[0].startswith("Mailroom demo in ")
    assert all(line.startswith("  ") for line in summary[1:]), summary
    assert not any(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ", line) for line in summary)
    assert "the worker handled everything due" in done.stdout
    log_path = Path(cli_env["MAILROOM_HOME"]) / "demo.log"
    assert f"  log: {log_path}" in summary
    assert " INFO " not in done.stderr
    assert " INFO worker.devtools.sink " in log_path.read_text()
