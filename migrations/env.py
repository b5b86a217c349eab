"""Alembic environment: runs revisions on the connection Mailroom hands over, inside the `mailroom` schema."""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from worker.core.schema import SCHEMA

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `mailroom db upgrade`, which supplies the connection")

# The oldest PostgreSQL Mailroom runs on (docs/install.md): revision 0001's NULLS NOT DISTINCT needs 15.
OLDEST = 15
if connection.dialect.server_version_info[0] < OLDEST:
    found = ".".join(map(str, connection.dialect.server_version_info))
    raise RuntimeError(f"Mailroom needs PostgreSQL {OLDEST} or newer; this server is PostgreSQL {found}")

connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{SCHEMA}"'))
context.configure(
    connection=connection,
    target_metadata=None,  # revisions are SQL parts; migrations/schema.sql shows the whole
    version_table_schema=SCHEMA,
    include_schemas=True,
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
