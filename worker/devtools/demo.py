"""`mailroom demo`: the whole product on one machine.

An embedded PostgreSQL, a local SMTP server that refuses a share of recipients (so retries, failures and
bounces appear), two demo sender accounts (one with a low daily limit, so it reaches it), a worker
process running delivery and every producer, and a feeder that keeps realistic activity flowing into
each producer. The console (in the `console` package) runs in front of this; `--headless` prints a
summary instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import class_row

from worker.core.config import Settings
from worker.core.crypto import SecretBox, secret_key
from worker.core.db import connect, database_url
from worker.devtools.demo_feed import SOURCES, Feed, counted
from worker.devtools.sink import RefuseShare, RunningSink, start_sink
from worker.engine.processes import die_with_parent, terminate
from worker.ops.senders import SenderSpec, add_sender

log = logging.getLogger("mailroom.demo")

LOW_LIMIT = 40
# The local SMTP server refuses these shares of recipients (by address), so retries, failures and
# bounces appear.
REFUSE = RefuseShare(temporary=0.08, permanent=0.04)
# The primary takes at most this many emails a claim (its own batch size): the low-limit account's
# slot takes the rest, so it reaches its limit while you watch instead of sharing by chance.
PRIMARY_BATCH = 2


def _ensure_senders(conn: psycopg.Connection[Any], box: SecretBox, port: int) -> None:
    existing = {str(r["name"]) for r in conn.execute("SELECT name FROM mailroom.sender_accounts").fetchall()}
    demo = [
        SenderSpec(
            "demo-primary",
            "noreply@demo.example.com",
            "127.0.0.1",
            port,
            "Mailroom Demo",
            "none",
            None,
            5000,
            batch_size=PRIMARY_BATCH,
        ),
        SenderSpec(
            "demo-low-limit",
            "hello@demo.example.com",
            "127.0.0.1",
            port,
            "Mailroom Demo",
            "none",
            None,
            LOW_LIMIT,
        ),
    ]
    for spec in demo:
        if spec.name not in existing:
            add_sender(conn, spec, None, box)
        else:
            # The local SMTP server listens on a new port each run.
            conn.execute(
                "UPDATE mailroom.sender_accounts SET smtp_port = %s, batch_size = %s WHERE name = %s",
                (port, spec.batch_size, spec.name),
            )


@dataclass
class DemoStack:
    """Everything the demo started; `stop()` stops all of it."""

    settings: Settings
    url: str
    sink: RunningSink
    worker: subprocess.Popen[bytes]
    worker_log: Path
    feed: Feed
    tracker: subprocess.Popen[bytes] | None = None
    _stopped: bool = field(default=False, repr=False)
    _feeder: threading.Thread | None = field(default=None, repr=False)

    def start_feeding(self, interval: float = 1.0) -> None:
        """Keep adding activity (one round every `interval` seconds) on a background thread."""
        self._feeder = threading.Thread(target=self.feed.run, args=(interval,), name="demo-feed", daemon=True)
        self._feeder.start()

    def stop(self) -> None:
        """Stop feeding, stop the worker (SIGTERM, then SIGKILL after 15 s) and the SMTP server."""
        if self._stopped:
            return
        self._stopped = True
        self.feed.stop()
        if self._feeder is not None:
            self._feeder.join(timeout=10)
        for process in (self.worker, self.tracker):
            if process is not None:
                terminate(process)
        self.sink.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(
    port: int, process: subprocess.Popen[bytes], log_path: Path, timeout: float = 30.0
) -> None:
    """Return once `process` accepts connections on `port`; raise if it exits or never does.

    The feed's readers open email at once; in a home with email from an earlier run they would reach
    for the tracker before it listens ("tracker unreachable")."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"the tracker exited with status {process.returncode}; see {log_path}")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the tracker did not listen on port {port} within {timeout:.0f} s; see {log_path}"
            )
        time.sleep(0.05)  # a child process starting: nothing to wait on but its port


def _spawn(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start `python -m worker.cli.main ARGV` with its output in `log_path`; it dies with the demo."""
    with log_path.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "worker.cli.main", *argv],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )


def start_demo(settings: Settings, *, concurrency: int = 2, say: Callable[[str], None] = print) -> DemoStack:
    """Start PostgreSQL, the SMTP server, the demo senders and a worker; return the running stack."""
    # The demo makes its key even against MAILROOM_DATABASE_URL: its senders keep no secret, and its
    # worker signs Message-IDs and links with it.
    key = secret_key(settings, make=True)
    box = SecretBox(key)
    say(f"Mailroom demo in {settings.home}")
    url = database_url(settings)
    say(f"  PostgreSQL: {url}")
    maildir = settings.home / "maildir"
    # aiosmtpd logs every envelope address unmasked at INFO: keep only its warnings.
    logging.getLogger("mail.log").setLevel(logging.WARNING)
    sink = start_sink(port=0, maildir=str(maildir), refuse_share=REFUSE, keep=500)
    shares = f"refuses {REFUSE.temporary:.0%} with 450, {REFUSE.permanent:.0%} with 550"
    say(f"  local SMTP server: 127.0.0.1:{sink.port} ({shares}; Maildir {maildir})")
    started: list[subprocess.Popen[bytes]] = []
    try:
        with connect(url) as conn:
            _ensure_senders(conn, box, sink.port)
            conn.commit()
        worker_log = settings.home / "demo-worker.log"
        tracker_port = _free_port()
        settings = replace(settings, base_url=f"http://127.0.0.1:{tracker_port}")
        env = {
            **os.environ,
            "MAILROOM_HOME": str(settings.home),
            "MAILROOM_DATABASE_URL": url,
            "MAILROOM_SECRET_KEY": key,
            "MAILROOM_BASE_URL": settings.base_url,
            "MAILROOM_RETRY_BASE_SECONDS": "5",
            "MAILROOM_RETRY_CAP_SECONDS": "60",
        }
        worker = _spawn(["worker", "--concurrency", str(concurrency)], env, worker_log)
        started.append(worker)
        say(f"  worker: pid {worker.pid}, log {worker_log}")
        tracker_log = settings.home / "demo-tracker.log"
        tracker = _spawn(["tracker", "--port", str(tracker_port)], env, tracker_log)
        started.append(tracker)
        _wait_listening(tracker_port, tracker, tracker_log)
        say(f"  tracker: {settings.base_url} (opens, clicks, one-click unsubscribe), log {tracker_log}")
    except BaseException:
        for process in started:
            terminate(process)
        sink.stop()
        raise
    feed = Feed(url, settings, random.Random(), SOURCES)
    return DemoStack(settings, url, sink, worker, worker_log, feed, tracker)


# The wait is for what is due when it begins: a retry the SMTP server deferred during it (the demo's sink
# refuses a share of addresses with 450 every time) is left for later, not waited for.
WAIT_UNTIL = "SELECT now() AS until"

# What the worker has yet to do of what was due at %(until)s, the wait's start: email due by then or being sent,
# activation tokens not mailed yet, birthday events due by then (a failed one once its retry is due).
# Then what is left for after it: email retried (or scheduled) later, birthday email due within a week.
WORK = """
SELECT
    (SELECT count(*) FROM mailroom.email_queue
      WHERE status = 'assigned' OR (status = 'pending' AND scheduled_for <= %(until)s))
  + (SELECT count(*) FROM mailroom.tokens
      WHERE mailed_at IS NULL AND mail_skipped_reason IS NULL AND expires_at > now())
  + (SELECT count(*) FROM mailroom.events
      WHERE status = 'processing' OR (status = 'pending' AND greatest(due_at, retry_at) <= %(until)s)) AS due,
    email.n AS email_later, email.next AS email_next,
    birthday.n AS birthdays_later, birthday.next AS birthday_next
FROM (SELECT count(*) AS n, min(scheduled_for) AS next FROM mailroom.email_queue
      WHERE status = 'pending' AND scheduled_for > %(until)s) email,
     (SELECT count(*) AS n, min(greatest(due_at, retry_at)) AS next FROM mailroom.events
      WHERE status = 'pending'
        AND greatest(due_at, retry_at) > %(until)s
        AND greatest(due_at, retry_at) <= %(until)s + interval '7 days') birthday
"""


@dataclass(frozen=True)
class Waited:
    """How a wait for the worker ended: whether nothing due within it was left, and what is for later."""

    due: int  # still due within the wait when it ended
    email_later: int = 0
    email_next: datetime | None = None
    birthdays_later: int = 0
    birthday_next: datetime | None = None

    @property
    def done(self) -> bool:
        """Whether the worker handled everything that was due when the wait began."""
        return self.due == 0

    def later(self) -> str | None:
        """What is left for after the wait, e.g. `2 emails due later (the next at ...)`; None for nothing."""
        parts = []
        if self.email_later:
            parts.append(f"{counted(self.email_later, 'email')} due later{_next(self.email_next)}")
        if self.birthdays_later:
            parts.append(
                f"{counted(self.birthdays_later, 'birthday email')} due this week{_next(self.birthday_next)}"
            )
        return ", ".join(parts) or None


def _next(when: datetime | None) -> str:
    return f" (the next at {when.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC)" if when is not None else ""


def wait_for_worker(url: str, timeout: float) -> Waited:
    """Wait up to `timeout` seconds until the worker has handled everything that was due when the wait began.

    What comes due only after that (a retry the relay deferred, a birthday tomorrow) is not waited
    for: `Waited.later` says it. The database is asked four times a second: the worker's progress
    has no one notification to wait on."""
    with connect(url) as conn:
        row = conn.execute(WAIT_UNTIL).fetchone()
        assert row is not None
        until = row["until"]
        deadline = time.monotonic() + timeout
        while True:
            with conn.cursor(row_factory=class_row(Waited)) as cur:
                waited = cur.execute(WORK, {"until": until}).fetchone()
            conn.commit()
            assert waited is not None
            if waited.done or time.monotonic() >= deadline:
                return waited
            time.sleep(0.25)


class _CountingFileHandler(logging.FileHandler):
    """The demo's log file, counting the warnings and errors written to it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8")
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        self.warnings = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record; count it when it is a warning or worse."""
        if record.levelno >= logging.WARNING:
            self.warnings += 1
        super().emit(record)


@contextlib.contextmanager
def _logs_to(path: Path) -> Iterator[_CountingFileHandler]:
    """Every log line of this process goes to `path` meanwhile, so that the summary on stdout stands alone."""
    root = logging.getLogger()
    saved = list(root.handlers)
    handler = _CountingFileHandler(path)
    for old in saved:
        root.removeHandler(old)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        handler.close()
        for old in saved:
            root.addHandler(old)


def run_headless(settings: Settings, rounds: int = 20, timeout: float = 60.0) -> int:
    """Feed `rounds` rounds of activity, wait until the worker has handled what is due, print a summary.

    The summary goes to stdout and nothing else does: log lines go to $MAILROOM_HOME/demo.log (the
    worker's and the tracker's to their own files), and a failure is said on stderr.
    """
    settings.home.mkdir(parents=True, exist_ok=True)
    log_path = settings.home / "demo.log"
    with _logs_to(log_path) as logged:
        code = _headless(settings, rounds, timeout)
    print(f"  log: {log_path}" + (f" ({logged.warnings} warning(s) or error(s))" if logged.warnings else ""))
    return code


def _headless(settings: Settings, rounds: int, timeout: float) -> int:
    from worker.ops.stats import queue_stats

    stack = start_demo(settings)
    try:
        for _ in range(rounds):
            stack.feed.round()
        print(f"  fed {counted(rounds, 'round')} of activity: {stack.feed.summary()}")
        waited = wait_for_worker(stack.url, timeout)
        with connect(stack.url) as conn:
            stats = queue_stats(conn)
        if waited.done:
            print("  the worker handled everything that was due")
        else:
            print(
                f"  still working after {timeout:.0f}s: {waited.due} still due (email, tokens, birthday events)"
            )
        later = waited.later()
        if later:
            print(f"  left for later: {later}")
        print(f"  the local SMTP server received {counted(len(stack.sink.messages), 'message')}")
        print("  queue: " + "  ".join(f"{k} {v}" for k, v in stats["queue"].items()))
        for s in stats["senders"]:
            print(f"  sender {s['name']}: {s['status']}, {s['sent_today']}/{s['limit_today']} today")
        if stack.worker.poll() is not None:
            print(
                f"error: the worker exited with status {stack.worker.returncode}; see {stack.worker_log}",
                file=sys.stderr,
            )
            return 1
        return 0
    finally:
        stack.stop()
