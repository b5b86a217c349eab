"""Every command that works on Mailroom's tables stops with exit status 4 and one line, before doing
anything, on a database where Mailroom is not installed and on one migrated by another version.

The commands are found by walking the command line itself, so a new command must be listed here
(with the arguments it needs to get past parsing) or named as one that does not use the schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from console.cli import ENTRIES
from tests.fixtures_db import create_database, drop_database
from worker.cli.main import main
from worker.cli.reference import commands
from worker.core import db

# Commands that do not read Mailroom's tables at this version: the local sink, a new key, the demo
# (its own embedded server), and `db`, which installs, migrates, shows and moves the schema itself.
NO_SCHEMA = {
    "sink",
    "keys generate",
    "demo",
    *(f"db {action}" for action in ("upgrade", "downgrade", "current", "url", "schema", "serve", "status")),
    *(f"db {action}" for action in ("stop", "backup", "restore", "verify")),
    "archive list",  # the archive is files: listed and verified without the database
    "archive verify",
}

# What each database command needs on its command line to get past parsing.
ARGUMENTS: dict[str, list[str]] = {
    "webhooks add": ["https://hooks.example.com/h", "--events", "all"],
    "webhooks list": [],
    "webhooks pause": ["1"],
    "webhooks resume": ["1"],
    "webhooks remove": ["1"],
    "webhooks replay": ["--since", "2026-01-01"],
    "webhooks test": ["1"],
    "accounts create": ["ada@example.com", "ada"],
    "accounts list": [],
    "accounts suspend": ["ada"],
    "accounts unsuspend": ["ada"],
    "accounts resend": ["ada"],
    "accounts recover": ["ada"],
    "accounts activate": ["--secret", "00"],
    "archive restore": ["--period", "2026"],
    "audit": [],
    "audit head": [],
    "audit verify": [],
    "audit prune": ["--before", "2020-01-01", "--reason", "r", "--yes"],
    "bounces ingest": ["-"],
    "bounces receive": ["--listen", "127.0.0.1:0"],
    "bounces poll": ["--imap", "127.0.0.1", "--user", "bounces", "--password-env", "BOUNCE_PASSWORD"],
    "bounces list": [],
    "bounces quarantine": [],
    "suppressions list": [],
    "suppressions history": ["ada@example.com"],
    "suppressions add": ["ada@example.com", "--reason", "r"],
    "suppressions remove": ["ada@example.com", "--reason", "r"],
    "suppressions export": ["-"],
    "suppressions import": ["-"],
    "dmarc ingest": ["-"],
    "dmarc report": [],
    "campaigns stats": ["spring"],
    "campaigns set": ["spring", "--no-open-tracking"],
    "campaigns show": ["spring"],
    "campaigns sender-address": ["relay", "--clear"],
    "db grant": ["app", "shop"],  # grants on this version's tables, and audits the grant
    "docs add": ["contract"],
    "docs expect": ["contract", "ada@example.com"],
    "docs sign": ["contract", "ada@example.com"],
    "docs status": ["contract"],
    "docs verify": [],
    "docs head": [],
    "docs remove-signatures": ["contract", "--reason", "r", "--yes"],
    "docs remind": ["contract"],
    "docs links": ["contract"],
    "docs checksum": ["contract", "--file", __file__],
    "enqueue": ["-"],
    "my": [],
    "health": [],
    "orders ingest": ["-"],
    "keys rotate": [],
    "maintenance run": [],
    "people add": ["ada@example.com", "Ada", "Lovelace", "--born", "1815-12-10", "--tz", "Europe/London"],
    "people update": ["0b7e3c1a-5d2f-4e8b-9a61-2f4c8d9e01c1", "--tz", "Europe/Paris"],
    "people list": [],
    "people delete": ["0b7e3c1a-5d2f-4e8b-9a61-2f4c8d9e01c1"],
    "events upcoming": [],
    "events list": [],
    "privacy export": ["ada@example.com"],
    "privacy erase": ["ada@example.com", "--yes"],
    "stats": [],
    "retry": ["1"],
    "cancel": ["1"],
    "senders add": ["relay", "--from", "a@example.com", "--host", "127.0.0.1", "--security", "none"],
    "senders edit": ["relay", "--daily-limit", "5"],
    "senders list": [],
    "senders check": ["--no-relay"],
    "senders pause": ["relay"],
    "senders resume": ["relay"],
    "senders suspend": ["relay"],
    "senders remove": ["relay", "--yes"],
    "tracker": ["--port", "0"],
    "worker": ["--drain"],
    "console": ["--read-only"],
}


def _runnable() -> set[str]:
    """Every command path that runs something: leaves, and groups that run on their own (`audit`)."""
    found = set()
    for path, ctx in commands(ENTRIES):
        command = ctx.command
        runs_alone = getattr(command, "invoke_without_command", False) or not hasattr(command, "commands")
        if path and runs_alone:
            found.add(" ".join(path))
    return found


def test_every_command_is_listed_as_using_the_schema_or_not() -> None:
    assert _runnable() == set(ARGUMENTS) | NO_SCHEMA


@pytest.fixture(scope="module")
def databases(pg_admin_url: str, template_db: str) -> Iterator[dict[str, str]]:
    """A database with nothing installed, and one at a revision this Mailroom does not know."""
    empty = create_database(pg_admin_url)
    newer = create_database(pg_admin_url, template_db)
    with psycopg.connect(newer, autocommit=True) as conn:
        conn.execute("UPDATE mailroom.alembic_version SET version_num = '0999'")
    yield {"empty": empty, "newer": newer}
    drop_database(pg_admin_url, empty)
    drop_database(pg_admin_url, newer)


EXPECTED = {
    "empty": "Mailroom is not installed in this database; run: mailroom db upgrade",
    "newer": f"the database schema is at 0999, newer than this Mailroom ({db.head_revision()}); upgrade Mailroom first",
}


@pytest.mark.parametrize("kind", ["empty", "newer"])
@pytest.mark.parametrize("command", sorted(ARGUMENTS))
def test_a_database_command_on_another_schema_exits_4_with_one_line(
    command: str,
    kind: str,
    databases: dict[str, str],
    tmp_path: Path,
    secret_key: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MAILROOM_DATABASE_URL", databases[kind])
    monkeypatch.setenv("MAILROOM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MAILROOM_SECRET_KEY", secret_key)
    monkeypatch.setenv("MAILROOM_NEW_SECRET_KEY", secret_key)
    code = main([*command.split(), *ARGUMENTS[command]], extra=ENTRIES)
    out, err = capsys.readouterr()
    assert (code, err, out) == (4, f"error: {EXPECTED[kind]}\n", "")
