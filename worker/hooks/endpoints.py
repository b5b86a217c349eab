"""Adding a webhook endpoint: its URL checked (worker.hooks.addresses), its secret made here, shown
once and stored encrypted, audited (`webhooks.add`). Listing and steering endpoints is
`worker.ops.webhook_endpoints`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from worker.core.crypto import SecretBox
from worker.hooks import signing
from worker.hooks.addresses import BadUrl, UnsafeAddress, check_literal, check_url
from worker.ops import audit
from worker.ops.webhook_endpoints import where

ADD = """
INSERT INTO mailroom.webhook_endpoints (url, owner_role, events, secret_encrypted, allow_private)
VALUES (%(url)s, %(role)s, %(events)s, %(secret)s, %(allow_private)s)
RETURNING id
"""


class EndpointError(ValueError):
    """An endpoint that cannot be added or changed as asked; nothing was changed."""


@dataclass(frozen=True)
class Added:
    """A new endpoint and its secret, which is shown this once."""

    id: int
    secret: str


def add(
    conn: psycopg.Connection[Any],
    box: SecretBox,
    url: str,
    events: list[str],
    *,
    role: str | None,
    allow_private: bool,
    actor: str,
) -> Added:
    """Store a new endpoint with a fresh secret (encrypted), audited; `EndpointError` when refused."""
    try:
        check_literal(check_url(url), allow_private=allow_private)
    except (BadUrl, UnsafeAddress) as exc:
        raise EndpointError(str(exc)) from None
    if role is not None:
        known = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        if known is None:
            raise EndpointError(
                f"no database role {role!r}: an endpoint receives the events of a role's email"
            )
    secret = signing.new_secret()
    params = {
        "url": url,
        "role": role,
        "events": events,
        "secret": box.encrypt(secret),
        "allow_private": allow_private,
    }
    row = conn.execute(ADD, params).fetchone()
    assert row is not None
    endpoint = int(_first(row))
    detail = {"url": where(url), "role": role, "events": events, "allow_private": allow_private}
    audit.record(conn, "webhooks.add", actor, f"webhook_endpoints:{endpoint}", 1, detail)
    return Added(endpoint, secret)


def _first(row: Any) -> Any:
    """The first column of a row, whichever row factory the connection has."""
    return next(iter(row.values())) if isinstance(row, dict) else row[0]
