"""Sender accounts as operators manage them: add (secrets encrypted), list with today's usage, pause, suspend, resume.

Every change an operator makes here writes an audit row in the same transaction (`worker.ops.audit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row

from worker.core.crypto import SecretBox
from worker.core.validation import ValidationError, check_header_text, normalise_address
from worker.ops import audit


@dataclass(frozen=True)
class SenderSpec:
    """What an operator gives to add a sender account."""

    name: str
    from_email: str
    smtp_host: str
    smtp_port: int
    from_name: str | None = None
    smtp_security: str = "starttls"
    smtp_username: str | None = None
    daily_limit: int = 2000
    warmup_stage: int = 0
    warmup_limit: int | None = None
    send_delay_ms: int = 0
    max_connections: int = 4
    dkim_domain: str | None = None  # DKIM d=; with dkim_selector and a key given to `add_sender`
    dkim_selector: str | None = None
    # SMTP timeouts of this account in seconds (None: the worker's MAILROOM_SMTP_*_TIMEOUT_SECONDS)
    connect_timeout_seconds: float | None = None
    command_timeout_seconds: float | None = None
    data_timeout_seconds: float | None = None


INSERT_SENDER = """
INSERT INTO mailroom.sender_accounts
    (name, from_email, from_name, smtp_host, smtp_port, smtp_security, smtp_username,
     smtp_password_encrypted, daily_limit, warmup_stage, warmup_limit, send_delay_ms, max_connections, status,
     dkim_domain, dkim_selector, dkim_private_key_encrypted,
     connect_timeout_seconds, command_timeout_seconds, data_timeout_seconds)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
RETURNING id
"""

LIST_SENDERS = """
SELECT s.id, s.name, s.from_email, s.smtp_host, s.smtp_port, s.smtp_security,
       -- an account that may send but whose relay fails is "unreachable" (its circuit is open)
       CASE WHEN s.circuit_state <> 'closed' AND s.status IN ('active', 'warming_up') THEN 'unreachable'
            ELSE s.status END AS status,
       CASE WHEN s.circuit_state <> 'closed' AND s.status IN ('active', 'warming_up')
            THEN s.circuit_reason ELSE s.status_reason END AS status_reason,
       s.circuit_state, s.circuit_since, s.circuit_retry_at, s.circuit_failures,
       s.daily_limit, s.warmup_stage, s.warmup_limit, s.send_delay_ms, s.last_used_at,
       CASE WHEN s.warmup_stage > 0 THEN least(s.daily_limit, s.warmup_limit) ELSE s.daily_limit END
           AS effective_limit,
       coalesce(u.sent, 0) AS sent_today, coalesce(u.bounces, 0) AS bounces_today,
       coalesce(u.errors, 0) AS errors_today
FROM mailroom.sender_accounts s
LEFT JOIN mailroom.sender_usage u
       ON u.sender_account_id = s.id AND u.day = (now() AT TIME ZONE 'UTC')::date
ORDER BY s.name
"""

# The audit action of each status an operator sets.
STATUS_ACTIONS = {"paused": "sender.pause", "suspended": "sender.suspend", "active": "sender.resume"}

# Which statuses each operator action may start from.
_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "paused": ("active", "warming_up", "paused_limit_reached"),
    "suspended": ("active", "warming_up", "paused", "paused_limit_reached"),
    "active": ("paused", "suspended"),
}

# Locked first: the status it is changed from (for the audit row) is the one the update replaces, even
# while a worker changes statuses too (a sender paused at its daily limit, or suspended by AUTH).
LOCK_SENDER = "SELECT id, status FROM mailroom.sender_accounts WHERE name = %s FOR UPDATE"

SET_STATUS = """
UPDATE mailroom.sender_accounts
SET status = CASE WHEN %(status)s = 'active' AND warmup_stage > 0 THEN 'warming_up' ELSE %(status)s END,
    status_reason = %(reason)s
WHERE id = %(id)s
RETURNING status
"""


def validate_spec(spec: SenderSpec) -> SenderSpec:
    """Check an operator's sender account before it is stored."""
    from_email = normalise_address("from_email", spec.from_email)
    if spec.from_name is not None:
        check_header_text("from_name", spec.from_name)
    if spec.smtp_security not in ("none", "starttls", "tls"):
        raise ValidationError("security", "must be none, starttls or tls")
    if not 1 <= spec.smtp_port <= 65535:
        raise ValidationError("port", "must be between 1 and 65535")
    if spec.warmup_stage and spec.warmup_limit is None:
        raise ValidationError("warmup_limit", "a warm-up stage needs a warm-up limit")
    for name, value in (("daily_limit", spec.daily_limit), ("send_delay_ms", spec.send_delay_ms)):
        if value < 0:
            raise ValidationError(name, "must not be negative")
    for name, seconds in (
        ("connect_timeout", spec.connect_timeout_seconds),
        ("command_timeout", spec.command_timeout_seconds),
        ("data_timeout", spec.data_timeout_seconds),
    ):
        if seconds is not None and not 0 < seconds <= 3600:
            raise ValidationError(name, "must be more than 0 and at most 3600 seconds")
    return SenderSpec(**{**spec.__dict__, "from_email": from_email})


def add_sender(
    conn: psycopg.Connection[Any],
    spec: SenderSpec,
    password: str | None,
    box: SecretBox,
    dkim_key: bytes | None = None,
    *,
    actor: str | None = None,
) -> int:
    """Store a sender account, its password and DKIM private key (PEM) encrypted, audited; return its id.

    `actor` is who asked (default: the OS user); the audit row never holds a secret.
    """
    spec = validate_spec(spec)
    encrypted = box.encrypt(password) if password else None
    dkim_encrypted = None
    if (spec.dkim_domain, spec.dkim_selector, dkim_key) != (None, None, None):
        from worker.core.dkim import check_identity, normalise_private_key

        if spec.dkim_domain is None or spec.dkim_selector is None or dkim_key is None:
            raise ValidationError("dkim", "DKIM needs a domain, a selector and a private key together")
        domain, selector = check_identity(spec.dkim_domain, spec.dkim_selector)
        spec = SenderSpec(**{**spec.__dict__, "dkim_domain": domain, "dkim_selector": selector})
        dkim_encrypted = box.encrypt(normalise_private_key(dkim_key).decode("ascii"))
    status = "warming_up" if spec.warmup_stage > 0 else "active"
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(
            INSERT_SENDER,
            (
                spec.name,
                spec.from_email,
                spec.from_name,
                spec.smtp_host,
                spec.smtp_port,
                spec.smtp_security,
                spec.smtp_username,
                encrypted,
                spec.daily_limit,
                spec.warmup_stage,
                spec.warmup_limit,
                spec.send_delay_ms,
                spec.max_connections,
                status,
                spec.dkim_domain,
                spec.dkim_selector,
                dkim_encrypted,
                spec.connect_timeout_seconds,
                spec.command_timeout_seconds,
                spec.data_timeout_seconds,
            ),
        )
        row = cur.fetchone()
    assert row is not None
    sender_id = int(row[0])
    audit.record(conn, "sender.add", actor or audit.cli_actor(), spec.name, 1, _added_detail(sender_id, spec))
    return sender_id


def _added_detail(sender_id: int, spec: SenderSpec) -> dict[str, Any]:
    """What an audit row says of a new sender account: where it sends from and through, never a secret."""
    return {
        "id": sender_id,
        "from": spec.from_email,
        "host": spec.smtp_host,
        "port": spec.smtp_port,
        "security": spec.smtp_security,
        "login": spec.smtp_username is not None,
        "daily_limit": spec.daily_limit,
        "warmup_stage": spec.warmup_stage,
        "dkim_domain": spec.dkim_domain,
    }


def list_senders(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Every sender account with today's (UTC) usage against its effective limit."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(LIST_SENDERS).fetchall()


def set_sender_status(
    conn: psycopg.Connection[Any],
    name: str,
    status: str,
    reason: str | None = None,
    *,
    actor: str | None = None,
) -> str:
    """Pause, suspend or resume one sender account by name, audited as `actor` (default: the OS user); its new status.

    Raises `LookupError` when no such account exists and `ValueError` when it is in a state the
    action does not apply to (resuming an active account, say); nothing is changed or audited then.
    """
    with conn.cursor(row_factory=tuple_row) as cur:
        current = cur.execute(LOCK_SENDER, (name,)).fetchone()
        if current is None:
            raise LookupError(f"no sender account named {name!r}")
        sender_id, before = int(current[0]), str(current[1])
        if before not in _TRANSITIONS[status]:
            raise ValueError(f"sender account {name!r} is {before}; cannot set it {status}")
        row = cur.execute(SET_STATUS, {"status": status, "reason": reason, "id": sender_id}).fetchone()
    assert row is not None
    detail = {"id": sender_id, "from": before, "to": str(row[0]), "reason": reason}
    audit.record(conn, STATUS_ACTIONS[status], actor or audit.cli_actor(), name, 1, detail)
    return str(row[0])
