"""`mailroom senders edit`: change some settings of a sender account, checked as when it was added."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from worker.cli.commands.sender_input import (
    Given,
    ask_secret,
    clears_login,
    doubtful_choices,
    password_from,
    plaintext_login_warning,
    settings_changes,
    settings_options,
)
from worker.cli.commands.sender_oauth import auth_changes, auth_options, oauth_secrets_from
from worker.cli.framework import Command, Database, interactive, with_database

if TYPE_CHECKING:
    import psycopg

AUTH_OF = "SELECT auth_type FROM mailroom.sender_accounts WHERE name = %s"
SETTINGS_OF = """
SELECT smtp_host, smtp_port, smtp_security, smtp_username, allow_plaintext_login
FROM mailroom.sender_accounts WHERE id = %s
"""
# The settings whose change can make a doubtful combination: the warnings are said again.
WATCHED = {"smtp_host", "smtp_port", "smtp_security", "smtp_username", "allow_plaintext_login"}

EDIT = """\
Change the settings of a sender account: only the options given change, checked as when the
account was added (the same warnings, the same refusal of a login without a password). Its status,
today's usage, DKIM key and name are left alone, except that a new daily or warm-up limit settles
its state at once: an account paused at its limit sends again when the new limit is above what it
sent today. --auth password or oauth2 switches how it logs in (to oauth2: give the endpoint,
the client id, secret and refresh token; back to password: a password; the other kind's secrets
are removed); a new refresh token replaces the stored one. --bounce-domain '' (or
--no-bounce-domain) and --relay-provider none remove those settings; --batch-size 0 gives it the
worker's --batch-size again. --version N applies the
change only if nobody changed the account since you read version N (`mailroom senders list
--json`). The edit is audited as sender.edit, with the settings
that changed (never a password). A worker uses the new settings from its next claim.
Exit status 0 when edited, 1 when there is no such account or the version is stale, 2 when a
setting is invalid.

Examples:
  mailroom senders edit transactional-1 --daily-limit 5000 --send-delay-ms 200
  mailroom senders edit transactional-1 --batch-size 50
  mailroom senders edit transactional-1 --batch-size 0
  SMTP_PASSWORD=... mailroom senders edit transactional-1 --password-env SMTP_PASSWORD
  mailroom senders edit relay --host smtp2.example.com --port 465 --security tls --version 7
  REFRESH_TOKEN=... mailroom senders edit gmail --oauth-refresh-token-env REFRESH_TOKEN
  mailroom senders edit relay --bounce-domain bounces.example.com --relay-provider sendgrid"""


@click.command("edit", cls=Command, help=EDIT, short_help="change some settings of a sender account")
@click.argument("name")
@settings_options(adding=False)
@auth_options(adding=False)
@with_database
def edit(db: Database, /, **options: Any) -> int:
    """`mailroom senders edit NAME [--option VALUE ...] [--version N]`."""
    from worker.core.config import ConfigError
    from worker.core.crypto import secret_box
    from worker.core.db import connect
    from worker.core.validation import ValidationError
    from worker.ops.sender_auth import OAuthSecrets
    from worker.ops.senders import edit_sender

    given = Given(**options)
    no_login = clears_login(given)
    if no_login and (given.username or given.password_source.given()):
        raise ConfigError(
            "--no-login (or --username '') removes the username and password: give it alone, without them"
        )
    changes = {**settings_changes(given), **auth_changes(given)}
    password = _password(db, given)
    secrets = oauth_secrets_from(given, ask=False)
    oauth = OAuthSecrets(*secrets) if secrets != (None, None) else None
    if not changes and password is None and oauth is None and not no_login:
        raise ConfigError("nothing to change: give at least one option (see `mailroom senders edit --help`)")
    box = secret_box(db.settings) if password is not None or oauth is not None else None
    with connect(db.url) as conn:
        try:
            done = edit_sender(
                conn,
                given.name,
                changes,
                box,
                password=password,
                drop_password=no_login,
                oauth=oauth,
                expected_version=given.version,
            )
        except LookupError as exc:
            click.echo(f"error: {str(exc).strip(chr(34))}", err=True)
            return 1
        except ValidationError as exc:  # a stale --version; any other refusal is said by main (exit 2)
            if exc.field == "version":
                click.echo(f"error: {exc}", err=True)
                return 1
            raise
        warnings = _warnings(conn, done.id) if WATCHED & set(done.changed) else []
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    what = ", ".join(done.changed) if done.changed else "nothing (the values given are the current ones)"
    click.echo(f"edited sender account {given.name} (version {done.version}, {done.status}): changed {what}")
    return 0


def _password(db: Database, given: Given) -> str | None:
    """The new password given; on a terminal, asked for when a password account gets a new username."""
    from worker.core.db import connect

    password = password_from(given)
    if given.username and password is None and interactive() and given.auth is None:
        with connect(db.url) as conn:
            row = conn.execute(AUTH_OF, (given.name,)).fetchone()
        if row is None or row["auth_type"] == "password":  # an oauth2 account is never asked for one
            password = (
                ask_secret(f"SMTP password for {given.username} (Enter to keep the stored one)") or None
            )
    return password


def _warnings(conn: psycopg.Connection[Any], sender_id: int) -> list[str]:
    """The doubtful choices the account's settings now make, said as `senders add` says them."""
    row = conn.execute(SETTINGS_OF, (sender_id,)).fetchone()
    if row is None:
        return []
    host, port, security = str(row["smtp_host"]), int(str(row["smtp_port"])), str(row["smtp_security"])
    warnings = doubtful_choices(host, port, security, None, check_login=False)
    username = None if row["smtp_username"] is None else str(row["smtp_username"])
    allowed = bool(row["allow_plaintext_login"])
    return warnings + plaintext_login_warning(host, security, username, allowed)
