"""Alembic environment and versions: the only way Mailroom's schema changes."""
