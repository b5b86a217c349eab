"""Least privilege: grant a database role what an application needs to enqueue, or what a reader needs.

An application's role may call `mailroom.enqueue(...)` and `mailroom.app_audit(...)` and read
`mailroom.my_emails` (the email it enqueued), nothing else; its idempotency keys are its own (scoped to
the login role). A read-only role (the console's `--read-only`, dashboards) may read every table of the
schema except the secret columns (`mailroom.is_secret_column`: credentials, tokens, bodies, template
data, headers, link URLs), and change nothing; granting again takes away what has become secret. The grants themselves are SQL
functions (`mailroom.grant_app_role`, `mailroom.grant_read_only_role` in schema.sql), so any tool can apply them; each grant leaves an audit row.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import sql

KINDS = ("app", "read-only")
_GRANT = {
    "app": "SELECT mailroom.grant_app_role(%s)",
    "read-only": "SELECT mailroom.grant_read_only_role(%s)",
}
_ROLE_EXISTS = "SELECT 1 FROM pg_roles WHERE rolname = %s"
_AUDIT = "SELECT mailroom.audit('role.grant', %s, %s, 1, jsonb_build_object('kind', %s::text, 'created', %s::boolean))"
_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class RoleError(ValueError):
    """The role cannot be granted: a bad name, or it does not exist and was not to be created."""


def grant(conn: psycopg.Connection[Any], kind: str, role: str, *, create: bool, actor: str) -> bool:
    """Grant `kind` ("app" or "read-only") to `role` in one transaction; True when the role was created.

    A created role may log in but has no password: set one (`ALTER ROLE ... PASSWORD`) or use the
    server's certificate or peer authentication."""
    if kind not in _GRANT:
        raise RoleError(f"unknown kind {kind!r}; one of: {', '.join(KINDS)}")
    if not _ROLE_NAME.match(role):
        raise RoleError(
            f"role name {role!r}: lower-case letters, digits and _, at most 63, not starting with a digit"
        )
    with conn.transaction():
        exists = conn.execute(_ROLE_EXISTS, (role,)).fetchone() is not None
        if not exists and not create:
            raise RoleError(f"role {role!r} does not exist; add --create to create it (LOGIN, no password)")
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(_GRANT[kind], (role,))
        conn.execute(_AUDIT, (actor, role, kind, not exists))
    return not exists
