"""Fixtures of the unit tier: everything a test needs short of a database or an SMTP server.

The tier runs with the database and SMTP plugins left out (`-p no:tests.fixtures_db -p no:tests.fixtures_smtp`),
so a unit test that asks for `db_url`, `conn`, `settings` or `smtp_sink` fails instead of starting PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.core.config import Settings
from worker.core.crypto import generate_key

# No server listens here: a test that connects by mistake is refused at once instead of hanging.
UNREACHABLE_DATABASE = "postgresql://mailroom@127.0.0.1:9/mailroom?connect_timeout=1"


@pytest.fixture
def secret_key() -> str:
    """A fresh MAILROOM_SECRET_KEY."""
    return generate_key()


@pytest.fixture
def plain_settings(tmp_path: Path, secret_key: str) -> Settings:
    """Settings with a private home directory and a database URL nothing listens on."""
    return Settings(home=tmp_path / "home", database_url=UNREACHABLE_DATABASE, secret_key=secret_key)
