"""Smoke test of an installed wheel, run by `python3 tasks.py test` inside a fresh virtual environment.

It runs from a directory outside the checkout, so every import comes from site-packages: every
module imports, every command's `--help` works, and the product works end to end on the embedded
server: `db upgrade`, a sender, `enqueue`, a drained worker delivering to the bundled sink, and
the console starting headless.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import json
import os
import pkgutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

SITE = Path(sysconfig.get_paths()["purelib"]).resolve()
BIN = Path(sys.executable).parent
MAILROOM = str(BIN / "mailroom")


def say(text: str) -> None:
    """One progress line."""
    print(f"[smoke] {text}", flush=True)


def import_everything() -> int:
    """Import every module of worker and console from site-packages; return how many.

    Alembic's scripts in migrations/ run inside Alembic only: `db upgrade` below loads them."""
    count = 0
    for top in ("worker", "console"):
        package = importlib.import_module(top)
        where = Path(package.__file__ or "").resolve()
        assert where.is_relative_to(SITE), f"{top} imported from {where}, not from {SITE}"
        for info in pkgutil.walk_packages(package.__path__, f"{top}."):
            importlib.import_module(info.name)
            count += 1
    assert (SITE / "migrations" / "env.py").is_file(), "migrations/ is not in the wheel"
    assert (SITE / "migrations" / "schema.sql").is_file(), "migrations/schema.sql is not in the wheel"
    assert any((SITE / "worker" / "core" / "templates").rglob("*")), "templates are not in the wheel"
    return count


def every_help() -> int:
    """`--help` of every command, in process (and once through the installed script); return how many."""
    from console.cli import ENTRIES, help_pages
    from console.cli import main as cli_main

    done = subprocess.run([MAILROOM, "--help"], capture_output=True, text=True, check=True)
    assert "Usage: mailroom" in done.stdout
    paths = [path for path, _ in help_pages()]
    for path in paths:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli_main([*path, "--help"]) == 0, f"help of {' '.join(path)} failed"
        assert "Usage: mailroom" in out.getvalue(), f"no help for {' '.join(path)}"
    assert set(ENTRIES) <= {path[0] for path in paths if path}
    return len(paths)


def mailroom(*args: str, stdin: str | None = None) -> str:
    """Run the installed `mailroom` command; its stdout."""
    done = subprocess.run([MAILROOM, *args], input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"mailroom {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def deliver_end_to_end(home: Path) -> None:
    """Migrate, add a sender, enqueue, deliver to the bundled sink and check what arrived."""
    mailroom("db", "upgrade")
    port, maildir = free_port(), home / "maildir"
    sink = subprocess.Popen([MAILROOM, "sink", "--port", str(port), "--maildir", str(maildir)])
    try:
        _wait_for_port(port)
        mailroom("senders", "add", "smoke", "--from", "smoke@example.com", "--host", "127.0.0.1",
                 "--port", str(port), "--security", "none")  # fmt: skip
        line = json.dumps({"to": "ada@example.com", "subject": "Smoke test", "text": "hello from the wheel"})
        result = json.loads(mailroom("enqueue", "-", stdin=line + "\n").splitlines()[0])
        assert "id" in result, result
        mailroom("worker", "--drain", "--no-producers", "--concurrency", "1")
        stats = json.loads(mailroom("stats", "--json"))
        assert stats["queue"]["sent"] == 1, stats
        arrived = [p.read_text() for p in maildir.rglob("*") if p.is_file()]
        assert any("Subject: Smoke test" in m for m in arrived), arrived
    finally:
        sink.terminate()
        sink.wait(timeout=10)


def _wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise SystemExit(f"the sink did not listen on port {port}")


def console_headless() -> None:
    """Start the console without a terminal, show the overview, and quit."""
    from console.app import MailroomConsole
    from console.wiring import ProducerActions
    from worker.core import db
    from worker.core.config import Settings
    from worker.core.db import database_url

    settings = Settings.from_env()
    url = database_url(settings)  # this process attaches to (and so keeps up) the embedded server

    async def run() -> None:
        app = MailroomConsole(url, settings, ProducerActions())
        async with app.run_test(size=(100, 30)) as pilot:
            assert await app.wait_until_shown(lambda: app.refreshes > 0, within=20), "no data shown"
            await pilot.press("q")

    asyncio.run(run())
    db.embedded_server(settings).close()  # this process lets go of the server (the last user: it stops)


def main() -> int:
    """Run every check; exit non-zero at the first failure."""
    with tempfile.TemporaryDirectory(prefix="mailroom-smoke-home-") as tmp:
        home = Path(tmp)
        os.environ["MAILROOM_HOME"] = str(home)
        os.environ.pop("MAILROOM_DATABASE_URL", None)
        os.environ["MAILROOM_SECRET_KEY"] = mailroom("keys", "generate").strip()
        say(f"imported {import_everything()} modules from {SITE}")
        say(f"--help of {every_help()} commands")
        deliver_end_to_end(home)
        say("db upgrade, senders add, enqueue, worker --drain delivered to the sink")
        console_headless()
        say("console started headless")
        mailroom("db", "stop")  # nothing left running: says so, exit 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
