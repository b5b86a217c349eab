"""Alembic revisions of the `mailroom` schema."""
