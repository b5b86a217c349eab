"""`mailroom db serve`: the embedded PostgreSQL kept up for psql and applications, let go when stopped."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.fixtures_db import scratch_root
from worker.core.embedded import EmbeddedPostgres

SCRIPT = Path(sys.executable).with_name("mailroom")


@pytest.fixture
def home() -> Iterator[Path]:
    """A fresh $MAILROOM_HOME (in memory when there is room); a server left running in it is stopped at the end."""
    path = Path(tempfile.mkdtemp(prefix="mailroom-serve-", dir=scratch_root()))
    yield path
    EmbeddedPostgres(path).stop_now()
    shutil.rmtree(path, ignore_errors=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILROOM_")}
    return {**env, "MAILROOM_HOME": str(home)}


@pytest.mark.e2e
def test_db_serve_keeps_the_embedded_server_up_for_others_until_terminated_then_lets_it_go(
    home: Path,
) -> None:
    serving = subprocess.Popen(
        [str(SCRIPT), "db", "serve"],
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert serving.stdout is not None and serving.stderr is not None
    try:
        dsn = serving.stdout.readline().strip()
        server = EmbeddedPostgres(home)
        assert serving.pid in server.users()
        # `db url` prints the same DSN and exits; the server stays up for psql and applications.
        url = subprocess.run(
            [str(SCRIPT), "db", "url"],
            env=_env(home),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert url.stdout.strip() == dsn and "1 Mailroom process(es) use it now" in url.stderr, url.stderr
        with psycopg.connect(dsn) as conn:
            revision = conn.execute("SELECT version_num FROM mailroom.alembic_version").fetchone()
        assert revision is not None
    finally:
        serving.terminate()
        code = serving.wait(timeout=60)
        said = serving.stderr.read()
        serving.stdout.close()
        serving.stderr.close()

    assert code == 0, said
    assert "let go of the embedded PostgreSQL" in said
    assert server.users() == {} and server.running_pid() is None  # its last user let go: it stopped
