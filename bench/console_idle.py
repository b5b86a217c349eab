"""CPU used by an idle console (target under 2% of one core), measured from /proc on Linux.

    .venv/bin/python -m bench.console_idle [SECONDS]

Runs `mailroom console` in a pseudo-terminal (120x40) against a throwaway database with a little
data, lets it settle, then reads the process's CPU time over SECONDS (default 30) with nothing
changing in the database.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
import time

from bench.common import database

SEED = """
INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port) VALUES
    ('primary', 'noreply@example.com', 'smtp.example.com', 587);
INSERT INTO mailroom.email_queue (recipient_email, subject, text_body)
SELECT 'user' || g || '@example.com', 'Hello ' || g, 'body' FROM generate_series(1, 1000) g
"""


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str]) -> int:
    """Start the console in a pty, wait, measure, stop."""
    import psycopg

    seconds = float(argv[0]) if argv else 30.0
    with database() as url:
        with psycopg.connect(url) as conn:
            for statement in SEED.split(";"):
                conn.execute(statement)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = {**os.environ, "MAILROOM_DATABASE_URL": url, "TERM": "xterm-256color", "COLUMNS": "120"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "console.cli", "console"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
        )
        os.close(slave)
        received = [0]

        def drain() -> None:
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                received[0] += len(chunk)

        threading.Thread(target=drain, daemon=True).start()
        try:
            time.sleep(8.0)  # start-up, first refresh, LISTEN connected
            before, out_before = cpu_seconds(proc.pid), received[0]
            time.sleep(seconds)
            used, written = cpu_seconds(proc.pid) - before, received[0] - out_before
        finally:
            os.write(master, b"q")
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait(timeout=10)
            os.close(master)
    print(
        f"idle console: {used:.2f} s of CPU in {seconds:.0f} s = {100 * used / seconds:.2f}% of one core"
        f" (target < 2%); {written:,} bytes drawn while idle"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
