"""The bounce fixtures (real Postfix DSNs, RFC examples, plain-text bounces) and emails for them to name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.core.recipient_tokens import message_id
from worker.core.return_path import derive_key, return_path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bounces"
# The key tests/fixtures/bounces/make_dsn.sh signed the captured return paths with.
FIXTURE_SECRET = "bWFpbHJvb20tYm91bmNlLWZpeHR1cmUta2V5LTAwMDA="
FIXTURE_KEY = derive_key(FIXTURE_SECRET)
BOUNCE_DOMAIN = "bounces.example"
_RETURN_PATH = re.compile(rb"bounces\+[0-9a-zA-Z-]+@bounces\.example")


def load(name: str) -> bytes:
    """The bytes of one fixture."""
    return (FIXTURES / name).read_bytes()


def names() -> list[str]:
    """Every fixture message."""
    return sorted(p.name for p in FIXTURES.glob("*.eml"))


def readdress(raw: bytes, email_id: int, recipient: str, key: bytes, message_id: str | None = None) -> bytes:
    """The fixture with every return path replaced by the one of this email and recipient (and its
    `<MSGID>` placeholder by `message_id`)."""
    address = return_path(email_id, recipient, BOUNCE_DOMAIN, "bounces", key).encode("ascii")
    out = _RETURN_PATH.sub(address, raw)
    return out.replace(b"<MSGID>", (message_id or "<none@example.invalid>").encode("ascii"))


def sent_email(
    db_url: str, to: str, *, cc: list[str] | None = None, sender_id: int | None = None
) -> dict[str, Any]:
    """Enqueue an email to `to` and record it sent (as the worker would), with its Message-ID."""
    with psycopg.connect(db_url) as conn:
        email_id = enqueue(
            conn, EmailRequest(to=to, cc=cc, subject="Welcome", text="Hello"), settings=Settings()
        )
        conn.execute(
            "UPDATE mailroom.email_queue SET status = 'assigned', sender_account_id = %s, lease_owner = 'test',"
            " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute' WHERE id = %s",
            (sender_id, email_id),
        )
        row = conn.execute(
            "UPDATE mailroom.email_queue SET status = 'sent', sent_at = now(), message_id = %s"
            " WHERE id = %s RETURNING id, message_id",
            (message_id(email_id, to, "example.org", FIXTURE_KEY), email_id),
        ).fetchone()
    assert row is not None
    return {"id": row[0], "message_id": row[1]}
