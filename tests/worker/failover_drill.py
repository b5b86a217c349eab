"""The failover drill: a worker delivering on the multi-host URL while the primary fails over.

The servers come from `tests.fixtures_failover`; the drill queues email, starts `mailroom worker`,
fails the primary once a quarter is delivered, promotes the standby and watches the sink: whether
every email arrived, which arrived twice and from which SMTP connection, how soon sending resumed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from tests.fixtures_failover import Pair
from tests.worker.helpers import add_sender
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.devtools.sink import ReceivedMessage, RunningSink

CONCURRENCY = 4
# Short, so that claims cut off by the failure outlive their lease and are rescued within the drill.
LEASE_SECONDS = 4.0
# From the failure to the promotion: the time a failover manager takes to decide.
OUTAGE_SECONDS = 2.0
# How long the standby falls behind before the primary crashes (its link congested): what the primary
# acknowledged meanwhile without waiting for the standby is lost with it.
LAG_SECONDS = 0.5


def crash(pair: Pair) -> None:
    """The primary crashes with the standby behind: the link to it held for `LAG_SECONDS`, then
    SIGKILL to the postmaster, and what the link held is lost."""
    assert pair.relay is not None
    pair.relay.hold()
    time.sleep(LAG_SECONDS)  # part of the scenario, not a wait for something
    pair.primary.kill()
    pair.relay.cut()


def demote(pair: Pair) -> None:
    """The primary loses its leadership and stays up, read-only."""
    pair.primary.demote()


AFTER = "after@example.com"  # the email enqueued once the drill is over
_MESSAGE_ID = re.compile(rb"^Message-ID:[ \t]*(\S+)", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Figures:
    """What a drill saw at the sink."""

    emails: int
    distinct: int  # Message-IDs received
    duplicates: int  # messages received more than once (extra copies)
    most_from_one_connection: int  # of the emails one SMTP connection sent, how many went out again
    sent_in_outage: int  # messages received from the failure to the promotion
    resumed_seconds: float  # from the promotion to the tenth message after it
    new_email_seconds: float  # an email enqueued after the drill: from its enqueue to the sink
    worker_exit: int | None  # None: the worker was still running when the drill ended


def worker_env(home: Path, secret_key: str, url: str, **more: str) -> dict[str, str]:
    """The environment of a drill's `mailroom worker`: the multi-host URL, a short lease, a home of its
    own, and no other `MAILROOM_*` setting of the test process."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("MAILROOM_")}
    return {
        **inherited,
        "MAILROOM_HOME": str(home),
        "MAILROOM_SECRET_KEY": secret_key,
        "MAILROOM_DATABASE_URL": url,
        "MAILROOM_LEASE_SECONDS": str(LEASE_SECONDS),
        "PYTHONUNBUFFERED": "1",
        **more,
    }


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`mailroom worker --no-producers` (not draining: it must live through the failover)."""
    script = Path(sys.executable).with_name("mailroom")
    argv = [str(script), "worker", "--no-producers", "--concurrency", str(CONCURRENCY)]
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=out)


def bulk_enqueue(url: str, n: int) -> None:
    """N plain emails, straight in with COPY."""
    statement = "COPY mailroom.email_queue (recipient_email, subject, text_body) FROM STDIN"
    with psycopg.connect(url) as conn, conn.cursor() as cur, cur.copy(statement) as copy:
        for i in range(n):
            copy.write_row((f"drill{i}@example.com", f"Failover drill {i}", "body"))


def _copies(messages: list[ReceivedMessage]) -> tuple[int, int, int]:
    """Distinct Message-IDs, extra copies, and the most emails of one connection sent again."""
    first_peer: dict[bytes, str | None] = {}
    sent_again: Counter[str | None] = Counter()
    for message in messages:
        found = _MESSAGE_ID.search(message.content)
        key = found.group(1) if found else message.content
        if key in first_peer:
            sent_again[first_peer[key]] += 1  # the connection whose copy went unrecorded
        else:
            first_peer[key] = message.peer
    return len(first_peer), sum(sent_again.values()), max(sent_again.values(), default=0)


def _wait_for_every_email(sink: RunningSink, emails: int, bound: float, log: Path) -> None:
    """Until every email's Message-ID has arrived (copies do not count); fails past `bound` seconds."""
    deadline = time.monotonic() + bound
    while True:
        messages = sink.messages  # one snapshot: what is still missing is counted against it
        distinct = _copies(messages)[0]
        if distinct >= emails:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            said = log.read_text(encoding="utf-8", errors="replace")[-4000:]
            raise AssertionError(f"{distinct} of {emails} emails arrived within {bound:.0f}s\n{said}")
        sink.wait_for_sync(len(messages) + emails - distinct, timeout=left)


# Bounds on waiting, not figures asserted: each wait ends as soon as what it waits for shows, and a
# loaded host may take long (a drill of 10,000 emails on a busy 2-core machine: minutes). The figures
# are printed; docs/high-availability.md quotes them from a quiet host.
RESUME_BOUND = 120.0
NEW_EMAIL_BOUND = 60.0
EVERY_EMAIL_BOUND = 400.0


def _seconds_to_resume(sink: RunningSink, promoted: datetime, bound: float = RESUME_BOUND) -> float:
    """Seconds from the promotion to the tenth message received after it (sends resumed, not one
    straggler); `bound` past them when fewer arrived by then."""
    sink.wait_for_sync(len(sink.messages) + 10, timeout=bound)
    after = sorted(m.received_at for m in sink.messages if m.received_at > promoted)
    return (after[9] - promoted).total_seconds() if len(after) >= 10 else bound


def _new_email_seconds(sink: RunningSink, url: str, bound: float = NEW_EMAIL_BOUND) -> float:
    """Enqueue one email through the Python API; seconds until the sink has it (`bound` when it has not
    arrived by then)."""
    started = time.monotonic()
    with psycopg.connect(url) as conn:
        request = EmailRequest(to=AFTER, subject="After the failover", text="hi")
        enqueue(conn, request, settings=Settings(database_url=url))
    while True:
        # Counted before looking: an email that arrives between the look and the wait is then not
        # waited for again (the wait would be for one message more, and last the whole bound).
        seen = len(sink.messages)
        if sink.messages_to(AFTER):
            return time.monotonic() - started
        left = started + bound - time.monotonic()
        if left <= 0:
            return bound
        sink.wait_for_sync(seen + 1, timeout=left)


def promote(pair: Pair) -> None:
    """The failover manager's decision: the standby becomes the primary."""
    pair.standby.promote()


def run_drill(
    pair: Pair,
    sink: RunningSink,
    env: dict[str, str],
    log: Path,
    fail: Callable[[Pair], None],
    emails: int,
    take_over: Callable[[Pair], None] = promote,
) -> Figures:
    """The drill: `emails` queued, a worker delivering on the URLs of `env`; once a quarter is
    delivered, `fail` the primary, `take_over` (promote the standby) `OUTAGE_SECONDS` later; then wait
    for every email, and send one more. The worker is stopped (SIGTERM) at the end if it still runs."""
    url = env["MAILROOM_DATABASE_URL"]
    # A daily limit above the drill's emails and the one after (the default, 10,000, would stop that one).
    add_sender(url, sink.port, max_connections=CONCURRENCY, daily_limit=emails + 100)
    bulk_enqueue(url, emails)
    worker = start_worker(env, log)
    try:
        assert sink.wait_for_sync(emails // 4, timeout=EVERY_EMAIL_BOUND), log.read_text()[-3000:]
        before = len(sink.messages)
        fail(pair)
        time.sleep(OUTAGE_SECONDS)  # the failover manager deciding: part of the scenario, not a wait
        take_over(pair)
        promoted = datetime.now(UTC)
        in_outage = len(sink.messages) - before
        resumed = _seconds_to_resume(sink, promoted)
        _wait_for_every_email(sink, emails, EVERY_EMAIL_BOUND, log)
        new_email = _new_email_seconds(sink, url)
        distinct, duplicates, most = _copies(sink.messages)
        return Figures(emails, distinct, duplicates, most, in_outage, resumed, new_email, worker.poll())
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
