"""Sender accounts as operators manage them: add (secrets encrypted), list with today's usage, pause, suspend, resume.

Every change an operator makes here writes an audit row in the same transaction (`worker.ops.audit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row

from worker.core.crypto import SecretBox
from worker.core.plaintext import PLAINTEXT_LOGIN_REFUSED, login_in_clear
from worker.core.validation import ValidationError, check_header_text, normalise_address
from worker.ops import audit, sender_streams
from worker.ops.sender_auth import (
    OAUTH_SETTINGS,
    OAuthSecrets,
    check_auth_change,
    check_secrets,
    checked_settings,
    secret_updates,
)


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
    # password, or oauth2 (AUTH XOAUTH2 as smtp_username, tokens from this endpoint and client id)
    auth_type: str = "password"
    oauth_token_url: str | None = None
    oauth_client_id: str | None = None
    # The domain of its VERP return paths (None: MAILROOM_BOUNCE_DOMAIN, else the From address)
    bounce_domain: str | None = None
    relay_provider: str | None = None  # postmark or sendgrid: tag each message for its event webhooks
    # Log in (password or OAuth2 token) even without TLS to a host off the loopback interface: see plaintext.py
    allow_plaintext_login: bool = False
    # gmail: the Google Workspace user its service account impersonates (the Gmail API sends as it)
    gmail_subject_email: str | None = None
    # Emails claimed for it at a time, sent before the worker looks at its bounces and errors again
    # (None: the worker's --batch-size, which is also the ceiling)
    batch_size: int | None = None
    # The message streams it sends, and the domains an email's own From may be in (worker.ops.sender_streams)
    streams: Sequence[str] = sender_streams.DEFAULT_STREAMS
    from_domains: Sequence[str] | None = None


# Every setting of a `SenderSpec` (same names) and the secrets, encrypted.
_INSERTED = (
    *SenderSpec.__dataclass_fields__,
    "status",
    "smtp_password_encrypted",
    "dkim_private_key_encrypted",
    "oauth_client_secret_encrypted",
    "oauth_refresh_token_encrypted",
    "gmail_key_encrypted",
)
INSERT_SENDER = f"""
INSERT INTO mailroom.sender_accounts ({", ".join(_INSERTED)})
VALUES ({", ".join(f"%({column})s" for column in _INSERTED)})
RETURNING id
"""  # noqa: S608 -- constant SQL text joined; values are parameters

# The status an account has now: one paused at its daily limit on an earlier UTC day may send again
# (the worker writes that down only at its next reservation, which may be hours away).
STATUS_NOW = """
CASE WHEN s.status = 'paused_limit_reached' AND s.limit_reached_on < (now() AT TIME ZONE 'UTC')::date
     THEN CASE WHEN s.warmup_stage > 0 THEN 'warming_up' ELSE 'active' END
     ELSE s.status END"""
REASON_NOW = """
CASE WHEN s.status = 'paused_limit_reached' AND s.limit_reached_on < (now() AT TIME ZONE 'UTC')::date
     THEN NULL ELSE s.status_reason END"""

LIST_SENDERS = f"""
SELECT s.id, s.name, s.from_email, s.from_name, s.smtp_host, s.smtp_port, s.smtp_security,
       s.smtp_username, s.version, s.max_connections, s.auth_type, s.oauth_token_url, s.oauth_client_id,
       s.bounce_domain, s.relay_provider, s.streams,
       mailroom.sender_from_domains(s.from_domains, s.from_email) AS from_domains,
       -- an account that may send but whose relay fails is "unreachable" (its circuit is open)
       CASE WHEN s.circuit_state <> 'closed' AND {STATUS_NOW} IN ('active', 'warming_up') THEN 'unreachable'
            ELSE {STATUS_NOW} END AS status,
       CASE WHEN s.circuit_state <> 'closed' AND {STATUS_NOW} IN ('active', 'warming_up')
            THEN s.circuit_reason ELSE {REASON_NOW} END AS status_reason,
       s.circuit_state, s.circuit_since, s.circuit_retry_at, s.circuit_failures,
       s.daily_limit, s.warmup_stage, s.warmup_limit, s.send_delay_ms, s.batch_size, s.last_used_at,
       CASE WHEN s.warmup_stage > 0 THEN least(s.daily_limit, s.warmup_limit) ELSE s.daily_limit END
           AS effective_limit,
       coalesce(u.sent, 0) AS sent_today, coalesce(u.bounces, 0) AS bounces_today,
       coalesce(u.errors, 0) AS errors_today
FROM mailroom.sender_accounts s
LEFT JOIN mailroom.sender_usage u
       ON u.sender_account_id = s.id AND u.day = (now() AT TIME ZONE 'UTC')::date
ORDER BY s.name
"""  # noqa: S608 -- constant SQL text joined; values are parameters

# The audit action of each status an operator sets.
STATUS_ACTIONS = {"paused": "sender.pause", "suspended": "sender.suspend", "active": "sender.resume"}

# Which statuses each operator action may start from.
_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "paused": ("active", "warming_up", "paused_limit_reached"),
    "suspended": ("active", "warming_up", "paused", "paused_limit_reached"),
    "active": ("paused", "suspended", "paused_limit_reached"),
}

# Locked first: the status it is changed from (for the audit row) is the one the update replaces, even
# while a worker changes statuses too (a sender paused at its daily limit, or suspended by AUTH).
LOCK_SENDER = f"""
SELECT id, status, {STATUS_NOW} AS status_now,
       coalesce(u.sent, 0) AS sent_today,
       CASE WHEN s.warmup_stage > 0 THEN least(s.daily_limit, s.warmup_limit) ELSE s.daily_limit END AS cap
FROM mailroom.sender_accounts s
LEFT JOIN mailroom.sender_usage u ON u.sender_account_id = s.id AND u.day = (now() AT TIME ZONE 'UTC')::date
WHERE s.name = %s
FOR UPDATE OF s
"""  # noqa: S608 -- constant SQL text joined; values are parameters

SET_STATUS = """
UPDATE mailroom.sender_accounts
SET status = CASE WHEN %(status)s = 'active' AND warmup_stage > 0 THEN 'warming_up' ELSE %(status)s END,
    status_reason = %(reason)s
WHERE id = %(id)s
RETURNING status
"""

# An account that may send (resumed, its limit raised, a new day) takes the state today's usage gives it:
# at or over its cap it is paused at its limit now, not when a worker next reserves; under it, it sends.
SETTLE_LIMIT = """
WITH today AS (
    SELECT s.id, (now() AT TIME ZONE 'UTC')::date AS day, coalesce(u.sent, 0) AS sent,
           CASE WHEN s.warmup_stage > 0 THEN least(s.daily_limit, s.warmup_limit) ELSE s.daily_limit END AS cap
    FROM mailroom.sender_accounts s
    LEFT JOIN mailroom.sender_usage u
           ON u.sender_account_id = s.id AND u.day = (now() AT TIME ZONE 'UTC')::date
    WHERE s.id = %(id)s
)
UPDATE mailroom.sender_accounts s
SET status = CASE WHEN t.sent >= t.cap THEN 'paused_limit_reached'
                  WHEN s.warmup_stage > 0 THEN 'warming_up' ELSE 'active' END,
    limit_reached_on = CASE WHEN t.sent >= t.cap THEN t.day END,
    status_reason = CASE WHEN t.sent >= t.cap THEN format('daily limit of %%s reached', t.cap)
                         WHEN s.status = 'paused_limit_reached' THEN NULL ELSE s.status_reason END
FROM today t
WHERE s.id = t.id AND s.status IN ('active', 'warming_up', 'paused_limit_reached')
  -- only a state that is wrong changes: an unchanged row keeps its version
  AND ((t.sent >= t.cap) <> (s.status = 'paused_limit_reached') OR s.limit_reached_on < t.day)
RETURNING s.status, t.sent, t.cap
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
    if (
        login_in_clear(spec.smtp_host, spec.smtp_security, spec.smtp_username)
        and not spec.allow_plaintext_login
    ):
        raise ValidationError("security", PLAINTEXT_LOGIN_REFUSED.format(host=spec.smtp_host))
    if spec.warmup_stage and spec.warmup_limit is None:
        raise ValidationError("warmup_limit", "a warm-up stage needs a warm-up limit")
    for name, value in (("daily_limit", spec.daily_limit), ("send_delay_ms", spec.send_delay_ms)):
        if value < 0:
            raise ValidationError(name, "must not be negative")
    if spec.batch_size is not None and spec.batch_size < 1:
        raise ValidationError("batch_size", "must be 1 or more (none: the worker's --batch-size)")
    for name, seconds in (
        ("connect_timeout", spec.connect_timeout_seconds),
        ("command_timeout", spec.command_timeout_seconds),
        ("data_timeout", spec.data_timeout_seconds),
    ):
        if seconds is not None and not 0 < seconds <= 3600:
            raise ValidationError(name, "must be more than 0 and at most 3600 seconds")
    checked = {**checked_settings(spec.__dict__), **sender_streams.checked(spec.__dict__)}
    return SenderSpec(**{**spec.__dict__, "from_email": from_email, **checked})


def add_sender(
    conn: psycopg.Connection[Any],
    spec: SenderSpec,
    password: str | None,
    box: SecretBox,
    dkim_key: bytes | None = None,
    *,
    oauth: OAuthSecrets | None = None,
    gmail_key: str | None = None,
    actor: str | None = None,
) -> int:
    """Store a sender account, its password (or OAuth2 client secret and refresh token) and DKIM
    private key (PEM) encrypted, audited; return its id.

    `gmail_key` is a Gmail API sender's service account key file (its JSON text), checked and stored
    encrypted. `actor` is who asked (default: the OS user); the audit row never holds a secret.
    """
    spec = validate_spec(spec)
    check_secrets(spec.auth_type, password, oauth, gmail_key)
    if gmail_key is not None:
        from worker.core.gmail_key import parse_service_account_key

        parse_service_account_key(gmail_key)  # refused now, not at the first send
    client_secret, refresh_token = (oauth or OAuthSecrets()).encrypted(box)
    spec, dkim_encrypted = _with_dkim(spec, dkim_key, box)
    values = {
        **spec.__dict__,
        "status": "warming_up" if spec.warmup_stage > 0 else "active",
        "smtp_password_encrypted": box.encrypt(password) if password else None,
        "dkim_private_key_encrypted": dkim_encrypted,
        "oauth_client_secret_encrypted": client_secret,
        "oauth_refresh_token_encrypted": refresh_token,
        "gmail_key_encrypted": box.encrypt(gmail_key) if gmail_key else None,
    }
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(INSERT_SENDER, values).fetchone()
    assert row is not None
    sender_id = int(row[0])
    audit.record(conn, "sender.add", actor or audit.cli_actor(), spec.name, 1, _added_detail(sender_id, spec))
    return sender_id


def _with_dkim(spec: SenderSpec, dkim_key: bytes | None, box: SecretBox) -> tuple[SenderSpec, bytes | None]:
    """The spec with its DKIM identity checked and normalised, and the private key encrypted (or no DKIM)."""
    if (spec.dkim_domain, spec.dkim_selector, dkim_key) == (None, None, None):
        return spec, None
    from worker.core.dkim import check_identity, normalise_private_key

    if spec.dkim_domain is None or spec.dkim_selector is None or dkim_key is None:
        raise ValidationError("dkim", "DKIM needs a domain, a selector and a private key together")
    domain, selector = check_identity(spec.dkim_domain, spec.dkim_selector)
    spec = SenderSpec(**{**spec.__dict__, "dkim_domain": domain, "dkim_selector": selector})
    return spec, box.encrypt(normalise_private_key(dkim_key).decode("ascii"))


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
        "batch_size": spec.batch_size,
        "warmup_stage": spec.warmup_stage,
        "dkim_domain": spec.dkim_domain,
        "auth": spec.auth_type,
        "bounce_domain": spec.bounce_domain,
        "relay_provider": spec.relay_provider,
        "allow_plaintext_login": spec.allow_plaintext_login,
        "impersonate": spec.gmail_subject_email,
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

    A resumed account takes the state today's usage gives it: one already at its daily limit is paused
    at its limit (and resumes by itself the next UTC day). Raises `LookupError` when no such account
    exists and `ValueError` when it is in a state the action does not apply to (resuming an active
    account, or one still at today's limit); nothing is changed or audited then.
    """
    with conn.cursor(row_factory=tuple_row) as cur:
        current = cur.execute(LOCK_SENDER, (name,)).fetchone()
        if current is None:
            raise LookupError(f"no sender account named {name!r}")
        sender_id, before, now, sent, cap = (int(current[0]), str(current[1]), str(current[2]), *current[3:])
        if before not in _TRANSITIONS[status] or (status == "active" and now in ("active", "warming_up")):
            raise ValueError(f"sender account {name!r} is {now}; cannot set it {status}")
        if status == "active" and before == "paused_limit_reached" and sent >= cap:
            raise ValueError(
                f"sender account {name!r} is at its daily limit ({sent}/{cap} sent today): it resumes by "
                f"itself at 00:00 UTC, or raise the limit with `mailroom senders edit {name} --daily-limit N`"
            )
        row = cur.execute(SET_STATUS, {"status": status, "reason": reason, "id": sender_id}).fetchone()
        if status == "active":
            row = cur.execute(SETTLE_LIMIT, {"id": sender_id}).fetchone() or row
    assert row is not None
    detail = {"id": sender_id, "from": before, "to": str(row[0]), "reason": reason}
    audit.record(conn, STATUS_ACTIONS[status], actor or audit.cli_actor(), name, 1, detail)
    return str(row[0])


# What `edit_sender` may change: every setting of `SenderSpec` but the name and DKIM (add the account again).
EDITABLE = (
    "from_email",
    "from_name",
    "smtp_host",
    "smtp_port",
    "smtp_security",
    "smtp_username",
    "daily_limit",
    "warmup_stage",
    "warmup_limit",
    "send_delay_ms",
    "batch_size",
    "max_connections",
    "connect_timeout_seconds",
    "command_timeout_seconds",
    "data_timeout_seconds",
    "auth_type",
    "oauth_token_url",
    "oauth_client_id",
    "bounce_domain",
    "relay_provider",
    "allow_plaintext_login",
    "gmail_subject_email",
    "streams",
    "from_domains",
)

LOCK_FOR_EDIT = f"""
SELECT id, name, version, status, dkim_domain, smtp_password_encrypted IS NOT NULL AS has_password,
       oauth_client_secret_encrypted IS NOT NULL AS has_client_secret,
       oauth_refresh_token_encrypted IS NOT NULL AS has_refresh_token, {", ".join(EDITABLE)}
FROM mailroom.sender_accounts WHERE name = %s FOR UPDATE
"""  # noqa: S608 -- constant SQL text joined; values are parameters

# Every editable column is written (unchanged ones with their own value): one statement, no SQL built
# from the names given. The password and OAuth2 secrets are kept unless new ones, or none, are given.
UPDATE_SENDER = f"""
UPDATE mailroom.sender_accounts
SET {", ".join(f"{column} = %({column})s" for column in EDITABLE)},
    smtp_password_encrypted = CASE WHEN %(password_change)s THEN %(password)s ELSE smtp_password_encrypted END,
    oauth_client_secret_encrypted = CASE WHEN %(secret_change)s THEN %(client_secret)s
                                         ELSE oauth_client_secret_encrypted END,
    oauth_refresh_token_encrypted = CASE WHEN %(refresh_change)s THEN %(refresh_token)s
                                         ELSE oauth_refresh_token_encrypted END
WHERE id = %(id)s
RETURNING version
"""  # noqa: S608 -- constant SQL text joined; values are parameters

# Emails a sender account still holds: pending or being sent through it, and its open claims.
# An operator took these out of service: removing one cannot strand email that is not in flight.
OUT_OF_SERVICE = ("paused", "suspended")

BOUND_EMAILS = """
SELECT (SELECT count(*) FROM mailroom.email_queue
        WHERE sender_account_id = %(id)s AND status IN ('pending', 'assigned')) AS emails,
       (SELECT count(*) FROM mailroom.email_queue
        WHERE sender_account_id = %(id)s AND status = 'assigned') AS in_flight,
       (SELECT count(*) FROM mailroom.claims WHERE sender_account_id = %(id)s) AS claims
"""

DELETE_SENDER = "DELETE FROM mailroom.sender_accounts WHERE id = %s"

STATUS_OF = f"SELECT {STATUS_NOW} AS status FROM mailroom.sender_accounts s WHERE s.id = %s"  # noqa: S608 -- constant SQL text joined; values are parameters


class SenderInUse(ValueError):
    """A sender account cannot be removed while emails are bound to it."""


@dataclass(frozen=True)
class SenderEdit:
    """What an edit did: the account, its new version and status, and the settings that changed."""

    id: int
    version: int
    status: str
    changed: tuple[str, ...]


def edit_sender(
    conn: psycopg.Connection[Any],
    name: str,
    changes: dict[str, Any],
    box: SecretBox | None = None,
    *,
    password: str | None = None,
    drop_password: bool = False,
    oauth: OAuthSecrets | None = None,
    expected_version: int | None = None,
    actor: str | None = None,
) -> SenderEdit:
    """Change only the given settings of a sender account, validated as when added, audited as `sender.edit`.

    `changes` maps names of `EDITABLE` to new values; `password` (encrypted with `box`) replaces the
    stored one, `drop_password` removes it; so do the secrets of `oauth` for an oauth2 account. With `expected_version` the edit applies only while the
    account is still at that version. A new limit settles its state against today's usage at once.
    Raises `LookupError` (no such account) or `ValueError` (invalid, stale); nothing changes then.
    """
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise ValidationError(unknown[0], "cannot be edited")
    if changes.get("auth_type") == "password":
        changes = {**dict.fromkeys(OAUTH_SETTINGS), **changes}  # back to a password: OAuth2 settings go
    with conn.cursor(row_factory=dict_row) as cur:
        current = _lock_for_edit(cur, name, expected_version)
        check_auth_change(current["auth_type"], changes.get("auth_type", current["auth_type"]))
        kept = {c: current[c] for c in EDITABLE}
        merged = validate_spec(
            SenderSpec(name=name, dkim_domain=current["dkim_domain"], **{**kept, **changes})
        )
        values = {c: getattr(merged, c) for c in EDITABLE}
        secrets, changed_secrets = secret_updates(current, values, password, drop_password, oauth, box)
        changed = tuple(c for c in EDITABLE if values[c] != current[c]) + changed_secrets
        update = {**values, **secrets, "id": current["id"]}
        row = cur.execute(UPDATE_SENDER, update).fetchone()
        cur.execute(SETTLE_LIMIT, {"id": current["id"]})
        status = cur.execute(STATUS_OF, (current["id"],)).fetchone()
    assert row is not None
    assert status is not None
    detail = {
        "id": current["id"],
        "version": row["version"],
        "changed": {c: [current[c], values[c]] for c in changed if c in values},
        # which secrets changed, never what they are
        **{
            secret: secret in changed for secret in ("password", "oauth_client_secret", "oauth_refresh_token")
        },
    }
    audit.record(conn, "sender.edit", actor or audit.cli_actor(), name, 1, detail)
    return SenderEdit(int(current["id"]), int(row["version"]), str(status["status"]), changed)


def _lock_for_edit(
    cur: psycopg.Cursor[dict[str, Any]], name: str, expected_version: int | None
) -> dict[str, Any]:
    """The account's row, locked until the transaction ends; refused when missing or at another version."""
    current = cur.execute(LOCK_FOR_EDIT, (name,)).fetchone()
    if current is None:
        raise LookupError(f"no sender account named {name!r}")
    if expected_version is not None and current["version"] != expected_version:
        raise ValidationError(
            "version", f"{name} is at version {current['version']}, not {expected_version}: read it again"
        )
    return current


def remove_sender(conn: psycopg.Connection[Any], name: str, *, actor: str | None = None) -> int:
    """Delete a sender account, audited as `sender.remove`; its id.

    Refused with `SenderInUse` (saying how many) while emails are pending or being sent through it or
    it holds claims: pause it and let them finish or move on first. A paused or suspended account sends
    nothing, so only its claims hold it (its pending email goes out through the others). Its usage and pacing rows go with
    it; sent email and the send log keep their history. Raises `LookupError` when there is no such account.
    """
    with conn.cursor(row_factory=dict_row) as cur:
        current = _lock_for_edit(cur, name, None)
        bound = cur.execute(BOUND_EMAILS, {"id": current["id"]}).fetchone()
        assert bound is not None
        if current["status"] in OUT_OF_SERVICE:
            # It sends nothing: its pending email goes out through the other senders (the claim does
            # not pin an email to the sender that last tried it), so only what is in flight holds it.
            if bound["in_flight"] or bound["claims"]:
                raise SenderInUse(
                    f"sender account {name!r} is {current['status']} and still holds {bound['claims']} open "
                    f"claim(s) ({bound['in_flight']} email(s) in flight): a worker returns them to the queue "
                    "when their lease ends; try again in a minute"
                )
        elif bound["emails"] or bound["claims"]:
            raise SenderInUse(
                f"sender account {name!r} still has {bound['emails']} email(s) pending or being sent through "
                f"it and {bound['claims']} open claim(s): pause it (`mailroom senders pause {name}`), let them "
                "finish or cancel them, then remove it"
            )
        cur.execute(DELETE_SENDER, (current["id"],))
    detail = {"id": current["id"], "from": current["from_email"], "host": current["smtp_host"]}
    audit.record(conn, "sender.remove", actor or audit.cli_actor(), name, 1, detail)
    return int(current["id"])
